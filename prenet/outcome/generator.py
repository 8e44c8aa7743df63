"""The early-success run corpus: short training runs over sampled hyperparameters, each recording its
per-epoch telemetry (:class:`prenet.telemetry.Recorder`), final test accuracy and wall time.

Domains are architecture × dataset: ``mlp`` (two-layer-style MLP; depth = hidden layers), ``cnn`` (compact CNN;
depth = conv blocks), ``resnet`` (small ResNet; depth = residual blocks) on ``digits`` (scikit-learn, 8×8) and
``fashion`` (Fashion-MNIST, a fixed subset, downsampled to 14×14).

Sampling (documented method, ``sample_configs``):

* the prior: optimizer uniform over ``optimizers`` (:data:`OPTIMIZERS`: SGD, SGD + momentum, Adam, AdamW; the
  momentum uniform over ``momentum_values``),
  learning rate log-uniform in that optimizer's ``lr_range``, weight decay 0 with probability ½ else log-uniform in
  the optimizer's ``weight_decay_range``, learning-rate schedule uniform over ``schedules`` (:data:`SCHEDULES`),
  batch size, width, depth, activation uniform from their lists, init scale log-uniform in ``init_scale_range``
  (every ≥2-D weight multiplied after the default init), training-set size the whole training data with probability
  ``full_data_probability`` else log-uniform in ``train_fraction_range`` (a share of it), label noise 0 with probability 1 − ``label_noise_probability`` else
  uniform in ``label_noise_range`` (that share of training labels replaced by random classes);
* the prior reaches late take-off (issue 29): collapsed and large init scales (plateaus at a saddle), heavy momentum
  (0.99) with small learning rates, and warm-up, so the corpus holds runs that sit near chance for epochs and then
  learn;
* the prior's ranges reach every failure mode users meet: divergence (large learning rates and init scales), dead
  units (ReLU with large steps), no learning (tiny learning rates, collapsed init scales), over-fitting (small
  training sets with label noise and no weight decay). The failure rate it yields is measured per domain in
  ``metrics/corpus.json`` and written beside the vendored corpus (data/outcome/vendored/README.md);
* enrichment near the success/failure boundary (**boundary interpolation**): after the first ``prior_fraction``
  of a domain's runs, each further run picks a random failed and a random successful earlier run of the domain,
  draws log init scale, log weight decay, log training-set size and label noise between theirs (±10 % of the
  span for the log ones), takes the optimizer with its learning rate from one of the two (log lr interpolated
  when both share the optimizer), and each other discrete setting from one of the two at random — so new runs land between the regions that succeed and fail.
* enrichment at late take-off (**take-off interpolation**, issue 29): ``takeoff_runs`` further runs per domain, each
  the same interpolation, between prior runs that were still near chance (validation accuracy below
  ``takeoff_below``) at epoch ``takeoff_epoch``: the first half between one that then failed and one that succeeded
  (a take-off), the second half between two take-offs — so the corpus holds many runs whose first epochs look alike
  and whose ends differ. A take-off here is a run below ``takeoff_below`` at ``takeoff_epoch`` that ends as a
  success (the failure rule, :func:`is_failure`): the vendored corpus's prior holds 16–29 of them among 300 runs
  per domain, its stall↔take-off half lands 10–14 % of its runs there, its take-off↔take-off half 20–28 %. Where the
  halves split depends on ``takeoff_runs``: changing it re-plans part of the second half.
* enrichment by **recipe** (issue 29: runs unlike the corpus): after the take-off runs, each recipe of ``enrich``
  (name → ``runs`` per domain, ``domains``, and ``space``: settings that replace the prior's, ``lr_range`` per
  optimizer) adds ``runs`` prior samples from the prior with those settings, phase = the recipe's name. The default
  ``heavy_ball`` recipe: heavy-ball SGD (momentum 0.9 or 0.99, constant or step schedule, lr 0.003–1) on MLPs 32–256
  wide, the region where a user's plain loop takes off late or collapses after looking fine (the out-of-corpus
  check's late collapses are MLPs 16–256 wide at momentum 0.99; the prior's widths stop at 64). Recipe runs do not
  depend on earlier results, and adding a recipe leaves every other run's plan as it was.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np
import polars as pl
import torch
from torch import nn

from prenet import datasets
from prenet.errors import PrenetError
from prenet.names import CORPUS_RECIPES
from prenet.optimizers import make_optimizer
from prenet.outcome.space import SCHEDULES
from prenet.outcome.telemetry_input import OPTIMIZER_COLUMNS
from prenet.telemetry import Recorder
from prenet.telemetry.recorder import optimizer_settings

DOMAIN_ARCHS = ("mlp", "cnn", "resnet")
DOMAIN_DATASETS = ("digits", "fashion")
#: the prenet.datasets name each domain dataset is drawn from
SOURCE_DATASET = {"digits": "digits", "fashion": "fashion_mnist"}


@dataclass(frozen=True)
class RunSpec:
    domain: str
    lr: float
    batch_size: int
    width: int
    depth: int
    activation: str
    init_scale: float
    weight_decay: float
    optimizer: str
    seed: int
    epochs: int
    schedule: str = "constant"
    label_noise: float = 0.0
    train_fraction: float = 1.0
    momentum: float = 0.9  # heavy-ball momentum of the ``momentum`` optimizer (unused by the others)

    @property
    def arch(self) -> str:
        return self.domain.split("_")[0]

    @property
    def dataset(self) -> str:
        return self.domain.split("_")[1]

    @property
    def run_id(self) -> str:
        """sha256 of the canonical configuration (16 hex digits): the frozen split's key."""
        d = asdict(self)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=float).encode()).hexdigest()[:16]


class _Block(nn.Module):
    def __init__(self, c: int, act: type[nn.Module]) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.a1, self.a2 = act(), act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a2(x + self.c2(self.a1(self.c1(x))))


def build_model(spec: RunSpec, *, image_size: int, classes: int = 10) -> nn.Module:
    """The network of a run (default PyTorch init, then every ≥2-D weight × ``init_scale``)."""
    act = nn.ReLU if spec.activation == "relu" else nn.Tanh
    w, d = spec.width, spec.depth
    if spec.arch == "mlp":
        layers: list[nn.Module] = [nn.Flatten()]
        prev = image_size * image_size
        for _ in range(d):
            layers += [nn.Linear(prev, w), act()]
            prev = w
        layers.append(nn.Linear(prev, classes))
        model = nn.Sequential(*layers)
    elif spec.arch == "cnn":
        layers, prev, size = [], 1, image_size
        for i in range(d):
            layers += [nn.Conv2d(prev, w, 3, padding=1), act()]
            if size >= 8:
                layers.append(nn.MaxPool2d(2))
                size //= 2
            prev = w
        model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(prev, classes))
    elif spec.arch == "resnet":
        model = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1), act(), *[_Block(w, act) for _ in range(d)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, classes)
        )
    else:
        raise ValueError(f"unknown architecture {spec.arch!r}; choose one of {', '.join(DOMAIN_ARCHS)}")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(spec.init_scale)
    return model


#: Share of a domain's training data held out as the per-epoch validation set (fixed per dataset, seed 11).
VALIDATION_SHARE = 0.15


def lr_factor(schedule: str, t: int, total: int) -> float:
    """Learning-rate multiplier at minibatch step ``t`` (0-based) of ``total``: ``constant`` 1; ``step`` ×0.1 from
    50 % and ×0.01 from 75 % of the steps; ``cosine`` ½(1 + cos πt/T); ``warmup_cosine`` linear from 1/W to 1 over
    the first W = 10 % of the steps, then cosine to 0."""
    f = t / max(total, 1)
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        return 1.0 if f < 0.5 else 0.1 if f < 0.75 else 0.01
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * f))
    if schedule == "warmup_cosine":
        w = max(1, int(0.1 * total))
        return (t + 1) / w if t < w else 0.5 * (1 + math.cos(math.pi * (t - w) / max(total - w, 1)))
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")


def optimizer_telemetry(runs: pl.DataFrame, telemetry: pl.DataFrame) -> pl.DataFrame:
    """``telemetry`` with the optimizer columns (``lr``, ``momentum``, ``adaptive``) a recorder given each run's optimizer
    records, from the run's settings (``runs``: ``run_id``, ``lr``, ``schedule``, ``optimizer``, ``momentum``,
    ``epochs``) exactly as :func:`train_run` sets them: ``lr`` the mean of ``spec.lr`` × :func:`lr_factor` over the
    epoch's steps (an epoch's ``minibatches``, from the epochs that ran to their end); ``momentum`` and ``adaptive`` as
    the recorder reads them off the run's optimizer (:func:`~prenet.telemetry.recorder.optimizer_settings`). From the
    epoch a run diverged in on, its rows are copies whose optimizer reading is not known: null. For a corpus recorded
    before the recorder read the optimizer."""
    spec = {r["run_id"]: r for r in runs.select("run_id", "lr", "schedule", "optimizer", "momentum", "epochs").iter_rows(named=True)}
    ran = telemetry.filter(pl.col("train_loss").is_not_null()).group_by("run_id")
    per_epoch, last = (dict(ran.agg(pl.col(c).max()).select("run_id", c).iter_rows()) for c in ("minibatches", "epoch"))
    kinds = {(s["optimizer"], s["momentum"]) for s in spec.values()}  # what the reading depends on: one optimizer each
    read = {k: optimizer_settings(make_optimizer(k[0], [torch.zeros(1, requires_grad=True)], momentum=k[1])) for k in kinds}
    settings = {rid: read[(s["optimizer"], s["momentum"])] for rid, s in spec.items()}
    factor: dict[tuple, float] = {}  # the epoch's mean lr factor, shared by the runs of one schedule and length
    lr: list[float | None] = []
    mom: list[float | None] = []
    ada: list[float | None] = []
    for rid, epoch in telemetry.select("run_id", "epoch").iter_rows():
        s = spec[rid]
        if rid not in per_epoch or epoch > last[rid]:  # the diverging epoch and its copies
            lr.append(None)
            mom.append(None)
            ada.append(None)
            continue
        key = (s["schedule"], int(per_epoch[rid]), int(s["epochs"]), int(epoch))
        if key not in factor:
            sched, steps, epochs, e = key
            factor[key] = float(np.mean([lr_factor(sched, t, steps * epochs) for t in range((e - 1) * steps, e * steps)]))
        lr.append(float(s["lr"]) * factor[key])
        mom.append(settings[rid]["momentum"])
        ada.append(settings[rid]["adaptive"])
    return telemetry.with_columns(pl.Series("lr", lr, pl.Float64), pl.Series("momentum", mom, pl.Float64), pl.Series("adaptive", ada, pl.Float64))


def with_optimizer_columns(runs: pl.DataFrame, telemetry: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``telemetry`` with the optimizer columns it lacks filled by :func:`optimizer_telemetry` (a corpus recorded before
    the recorder read the optimizer), and the names of those it lacked (empty: ``telemetry`` as it is)."""
    missing = [c for c in OPTIMIZER_COLUMNS if c not in telemetry.columns]
    return (optimizer_telemetry(runs, telemetry) if missing else telemetry), missing


def run_optimizer(spec: RunSpec, params) -> torch.optim.Optimizer:
    """The run's optimizer (:data:`OPTIMIZERS`, built by :func:`prenet.optimizers.make_optimizer`)."""
    return make_optimizer(spec.optimizer, params, lr=spec.lr, weight_decay=spec.weight_decay, momentum=spec.momentum)


def domain_data(
    dataset: str, *, fashion_train: int, fashion_test: int, image_size: int = 14
) -> tuple[datasets.ImageData, datasets.ImageData, datasets.ImageData]:
    """(train, validation, test) of a dataset as the corpus uses it: Fashion-MNIST as a fixed subset downsampled to
    ``image_size``; the validation set is a fixed :data:`VALIDATION_SHARE` of the training data (seed 11)."""
    if dataset == "digits":
        full, te = datasets.load("digits", "train"), datasets.load("digits", "test")
    else:
        full = datasets.load(SOURCE_DATASET[dataset], "train").select(None, limit=fashion_train, seed=7)
        te = datasets.load(SOURCE_DATASET[dataset], "test").select(None, limit=fashion_test, seed=7)

    def down(d: datasets.ImageData) -> datasets.ImageData:
        x = torch.nn.functional.adaptive_avg_pool2d(d.x, image_size) if d.x.shape[-1] != image_size else d.x
        return datasets.ImageData(d.name, x, d.y, d.source)

    full, te = down(full), down(te)
    perm = torch.randperm(len(full), generator=torch.Generator().manual_seed(11))
    nv = max(1, int(VALIDATION_SHARE * len(full)))
    va, tr = perm[:nv], perm[nv:]
    return (
        datasets.ImageData(full.name, full.x[tr], full.y[tr], full.source),
        datasets.ImageData(full.name, full.x[va], full.y[va], full.source),
        te,
    )


def run_train_set(spec: RunSpec, train: datasets.ImageData, classes: int = 10) -> datasets.ImageData:
    """The run's own training set: the first ``train_fraction`` of a seeded permutation, then ``label_noise`` of its
    labels replaced by uniformly random classes (both seeded by the run)."""
    g = torch.Generator().manual_seed(spec.seed + 1)
    n = max(spec.batch_size, int(round(spec.train_fraction * len(train))))
    idx = torch.randperm(len(train), generator=g)[:n]
    x, y = train.x[idx], train.y[idx].clone()
    if spec.label_noise > 0:
        flip = torch.rand(len(y), generator=g) < spec.label_noise
        y[flip] = torch.randint(0, classes, (int(flip.sum()),), generator=g)
    return datasets.ImageData(train.name, x, y, train.source)


def _evaluate(model: nn.Module, data: datasets.ImageData) -> tuple[float, float]:
    """(mean cross-entropy in nats, accuracy) of ``model`` on ``data`` in eval mode; (nan, chance) if not finite."""
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(data.x)
    model.train(was)
    if not torch.isfinite(out).all():
        return float("nan"), float((out.nan_to_num().argmax(1) == data.y).float().mean())
    return float(nn.functional.cross_entropy(out, data.y)), float((out.argmax(1) == data.y).float().mean())


def train_run(
    spec: RunSpec, train: datasets.ImageData, val: datasets.ImageData, test: datasets.ImageData, *, probe: int = 128, record: bool = True
) -> dict[str, Any]:
    """Train one run for ``spec.epochs`` epochs on its own training set (:func:`run_train_set`). Returns its telemetry
    rows (with validation loss and accuracy each epoch), final test accuracy, whether the loss became non-finite
    (training stops there; later epochs repeat the last row with null losses) and wall times (s)."""
    torch.manual_seed(spec.seed)
    train = run_train_set(spec, train)
    model = build_model(spec, image_size=int(train.x.shape[-1]))
    opt = run_optimizer(spec, model.parameters())
    steps_per_epoch = math.ceil(len(train) / spec.batch_size)
    total = steps_per_epoch * spec.epochs
    rec = Recorder(model, probe_inputs=train.x[:probe], optimizer=opt) if record else None
    g = torch.Generator().manual_seed(spec.seed)
    t0 = time.perf_counter()
    diverged_at = None
    rows: list[dict] = []
    step = 0
    for epoch in range(1, spec.epochs + 1):
        if diverged_at is not None:
            if rows:
                rows.append({**rows[-1], "epoch": epoch, "train_loss": None, "val_loss": None})
            continue
        model.train()
        perm = torch.randperm(len(train), generator=g)
        tl, tc, n = 0.0, 0, 0
        for i in range(0, len(train), spec.batch_size):
            b = perm[i : i + spec.batch_size]
            for group in opt.param_groups:
                group["lr"] = spec.lr * lr_factor(spec.schedule, step, total)
            step += 1
            opt.zero_grad(set_to_none=True)
            out = model(train.x[b])
            loss = nn.functional.cross_entropy(out, train.y[b])
            loss.backward()
            if rec is not None:
                rec.after_backward(loss)
            opt.step()
            lv = float(loss.detach())
            tl += lv * len(b)
            tc += int((out.argmax(1) == train.y[b]).sum())
            n += len(b)
            if not math.isfinite(lv):
                diverged_at = epoch
                break
        if rec is not None:
            vl, va = _evaluate(model, val)
            rows.append(
                rec.end_epoch(train_loss=tl / n if diverged_at is None else float("nan"), train_accuracy=tc / n, val_loss=vl, val_accuracy=va)
            )
    wall = time.perf_counter() - t0
    _, acc = _evaluate(model, test)
    if diverged_at is not None:
        acc = 1.0 / 10
    return {
        "rows": rows,
        "final_test_accuracy": acc,
        "diverged": diverged_at is not None,
        "wall_seconds": wall,
        "recorder_seconds": rec.seconds if rec is not None else 0.0,
    }


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def sample_prior(domain: str, space: Mapping[str, Any], rng: np.random.Generator, *, seed: int, epochs: int) -> RunSpec:
    """One run from the prior (module docstring). ``space`` keys: optimizers, lr_range (per optimizer),
    weight_decay_range (per optimizer), schedules, batch_sizes, widths, depths, activations, init_scale_range,
    label_noise_probability, label_noise_range, full_data_probability, train_fraction_range, momentum_values (the
    momentum optimizer's; 0.9 when absent)."""
    opt = str(rng.choice(space["optimizers"]))
    lo, hi = space["lr_range"][opt]
    wd = 0.0 if rng.random() < 0.5 else _log_uniform(rng, *space["weight_decay_range"][opt])
    noise = float(rng.uniform(*space["label_noise_range"])) if rng.random() < float(space["label_noise_probability"]) else 0.0
    frac = 1.0 if rng.random() < float(space["full_data_probability"]) else _log_uniform(rng, *space["train_fraction_range"])
    return RunSpec(
        domain,
        _log_uniform(rng, lo, hi),
        int(rng.choice(space["batch_sizes"])),
        int(rng.choice(space["widths"])),
        int(rng.choice(space["depths"])),
        str(rng.choice(space["activations"])),
        _log_uniform(rng, *space["init_scale_range"]),
        wd,
        opt,
        seed,
        epochs,
        str(rng.choice(space["schedules"])),
        noise,
        frac,
        float(rng.choice(space.get("momentum_values", [0.9]))) if opt == "momentum" else 0.9,
    )


def sample_between(a: RunSpec, b: RunSpec, rng: np.random.Generator, *, seed: int) -> RunSpec:
    """Boundary interpolation between a failed run ``a`` and a successful run ``b`` (see the module docstring)."""

    def between(x: float, y: float) -> float:
        lx, ly = math.log(max(x, 1e-12)), math.log(max(y, 1e-12))
        span = abs(ly - lx)
        lo, hi = min(lx, ly) - 0.1 * span, max(lx, ly) + 0.1 * span
        return float(math.exp(rng.uniform(lo, hi))) if hi > lo else float(math.exp(lx))

    pick = lambda f: getattr(a if rng.random() < 0.5 else b, f)  # noqa: E731
    src = a if rng.random() < 0.5 else b  # the optimizer, its momentum and its learning rate come as a pair
    opt = src.optimizer
    lr = between(a.lr, b.lr) if a.optimizer == b.optimizer else src.lr
    wd = 0.0 if (a.weight_decay == 0 and b.weight_decay == 0) else between(a.weight_decay or 1e-6, b.weight_decay or 1e-6)
    noise = float(rng.uniform(min(a.label_noise, b.label_noise), max(a.label_noise, b.label_noise)))
    return RunSpec(
        a.domain,
        lr,
        pick("batch_size"),
        pick("width"),
        pick("depth"),
        pick("activation"),
        between(a.init_scale, b.init_scale),
        wd,
        opt,
        seed,
        a.epochs,
        pick("schedule"),
        noise,
        min(1.0, between(a.train_fraction, b.train_fraction)),
        src.momentum,
    )


def is_failure(final_test_accuracy: float, diverged: bool, threshold: float) -> bool:
    """Failure: the loss became non-finite, or the final test accuracy is below ``threshold``."""
    return bool(diverged or final_test_accuracy < threshold)


#: (final test accuracy, diverged, validation accuracy at the take-off epoch — NaN when unknown) of a finished run
RunResult = tuple[float, bool, float]


def _pick_pair(rng: np.random.Generator, a: list[RunSpec], b: list[RunSpec]) -> tuple[RunSpec, RunSpec]:
    return a[rng.integers(len(a))], b[rng.integers(len(b))]


def plan_domain(
    domain: str,
    space: Mapping[str, Any],
    *,
    n_runs: int,
    prior_fraction: float,
    epochs: int,
    seed: int,
    prior_results: Mapping[str, RunResult] | None = None,
    failure_fraction: float = 0.5,
    takeoff_runs: int = 0,
    takeoff_below: float = 0.2,
    enrich: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[RunSpec, str]]:
    """The runs of one domain, as (spec, phase). The first ⌈prior_fraction · n_runs⌉ come from the prior; the
    rest of the ``n_runs`` are boundary interpolations between prior runs, then ``takeoff_runs`` take-off
    interpolations (module docstring); both need ``prior_results`` (run_id → :data:`RunResult`); without it, only
    the prior runs are returned. Where a domain's prior has no pair to interpolate between, the run comes from the
    prior instead. Then the runs of each ``enrich`` recipe that names the domain (:func:`recipe_runs`), with or
    without results. Deterministic in (domain, seed, results)."""
    import zlib

    n_prior = min(n_runs, max(1, math.ceil(prior_fraction * n_runs)))
    base = [seed, zlib.crc32(domain.encode())]
    prior = [sample_prior(domain, space, np.random.default_rng([*base, i]), seed=seed * 100_000 + i, epochs=epochs) for i in range(n_prior)]
    extra = recipe_runs(domain, space, enrich or {}, start=n_runs + takeoff_runs, base=base, seed=seed, epochs=epochs)
    out = [(s, "prior") for s in prior]
    if prior_results is None or n_prior == n_runs + takeoff_runs:
        return out + extra
    done = [(s, prior_results[s.run_id]) for s in prior if s.run_id in prior_results]
    accs = [r[0] for _, r in done]
    thr = failure_fraction * float(np.quantile(accs, 0.9)) if accs else 0.0
    failed = [s for s, r in done if is_failure(r[0], r[1], thr)]
    good = [s for s, r in done if not is_failure(r[0], r[1], thr)]
    slow = [(s, r) for s, r in done if not r[1] and r[2] < takeoff_below]  # NaN (unknown) is never slow
    stalled = [s for s, r in slow if is_failure(r[0], r[1], thr)]
    bloomed = [s for s, r in slow if not is_failure(r[0], r[1], thr)]
    for i in range(n_prior, n_runs + takeoff_runs):
        rng = np.random.default_rng([*base, i])
        if i < n_runs:
            pool, phase = (failed, good), "boundary"
        else:  # the first half of the take-off runs between a stall and a take-off, the second between two take-offs
            pool, phase = ((stalled, bloomed) if i < n_runs + math.ceil(takeoff_runs / 2) else (bloomed, bloomed)), "takeoff"
        if pool[0] and pool[1]:
            out.append((sample_between(*_pick_pair(rng, *pool), rng, seed=seed * 100_000 + i), phase))
        else:
            out.append((sample_prior(domain, space, rng, seed=seed * 100_000 + i, epochs=epochs), "prior"))
    return out + extra


def recipe_space(space: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The prior's ``space`` with a recipe's ``settings`` in place of its own (``lr_range`` and
    ``weight_decay_range`` per optimizer, the others whole)."""
    out = dict(space)
    for k, v in settings.items():
        out[k] = {**space[k], **v} if k in ("lr_range", "weight_decay_range") else v
    return out


def recipe_runs(
    domain: str, space: Mapping[str, Any], enrich: Mapping[str, Mapping[str, Any]], *, start: int, base: list[int], seed: int, epochs: int
) -> list[tuple[RunSpec, str]]:
    """The runs of each recipe of ``enrich`` (name → ``runs``, ``domains``, ``space``) that names ``domain``, as
    (spec, recipe name), indexed on from ``start`` (after the domain's prior, boundary and take-off runs)."""
    out: list[tuple[RunSpec, str]] = []
    i = start
    for name, r in enrich.items():
        if name not in CORPUS_RECIPES:
            raise PrenetError(
                f"outcome.corpus.enrich: unknown recipe {name!r} (its runs' phase); choose one of {', '.join(CORPUS_RECIPES)}, "
                "or add the name to prenet.names.CORPUS_RECIPES"
            )
        if domain not in r["domains"]:
            continue
        sub = recipe_space(space, r.get("space", {}))
        for _ in range(int(r["runs"])):
            out.append((sample_prior(domain, sub, np.random.default_rng([*base, i]), seed=seed * 100_000 + i, epochs=epochs), str(name)))
            i += 1
    return out
