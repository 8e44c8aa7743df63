"""The early-success run corpus: short training runs over sampled hyperparameters, each recording its
per-epoch telemetry (:class:`prenet.telemetry.Recorder`), final test accuracy and wall time.

Domains are architecture × dataset: ``mlp`` (two-layer-style MLP; depth = hidden layers), ``cnn`` (compact CNN;
depth = conv blocks), ``resnet`` (small ResNet; depth = residual blocks) on ``digits`` (scikit-learn, 8×8) and
``fashion`` (Fashion-MNIST, a fixed subset, downsampled to 14×14).

Sampling (documented method, ``sample_configs``):

* the prior: learning rate log-uniform in ``lr_range`` of the optimizer, batch size, width, depth, activation from
  their lists, init scale log-uniform in ``init_scale_range`` (every weight tensor multiplied after the default
  init), weight decay log-uniform in ``weight_decay_range`` or 0 with probability ½, optimizer SGD (momentum 0.9)
  or Adam;
* enrichment near the success/failure boundary (**boundary interpolation**): after the first ``prior_fraction``
  of a domain's runs, each further run picks a random failed and a random successful earlier run of the domain,
  draws log lr, log init scale and log weight decay uniformly between theirs (±10 % of the span), and takes each
  discrete setting from one of the two at random — so new runs land between the regions that succeed and fail.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from prenet import datasets
from prenet.telemetry import Recorder

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
        model = nn.Sequential(nn.Conv2d(1, w, 3, padding=1), act(), *[_Block(w, act) for _ in range(d)],
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, classes))
    else:
        raise ValueError(f"unknown architecture {spec.arch!r}; choose one of {', '.join(DOMAIN_ARCHS)}")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(spec.init_scale)
    return model


def domain_data(dataset: str, *, fashion_train: int, fashion_test: int, image_size: int = 14) -> tuple[datasets.ImageData, datasets.ImageData]:
    """(train, test) of a dataset as the corpus uses it (a fixed subset of Fashion-MNIST, downsampled)."""
    if dataset == "digits":
        return datasets.load("digits", "train"), datasets.load("digits", "test")
    tr = datasets.load(SOURCE_DATASET[dataset], "train").select(None, limit=fashion_train, seed=7)
    te = datasets.load(SOURCE_DATASET[dataset], "test").select(None, limit=fashion_test, seed=7)

    def down(d: datasets.ImageData) -> datasets.ImageData:
        x = torch.nn.functional.adaptive_avg_pool2d(d.x, image_size) if d.x.shape[-1] != image_size else d.x
        return datasets.ImageData(d.name, x, d.y, d.source)

    return down(tr), down(te)


def train_run(spec: RunSpec, train: datasets.ImageData, test: datasets.ImageData, *, probe: int = 128, record: bool = True) -> dict[str, Any]:
    """Train one run for ``spec.epochs`` epochs. Returns its telemetry rows, final test accuracy, whether the loss
    became non-finite (training stops there; later epochs get null losses) and wall times (s)."""
    torch.manual_seed(spec.seed)
    model = build_model(spec, image_size=int(train.x.shape[-1]))
    opt = (torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9, weight_decay=spec.weight_decay) if spec.optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay))
    rec = Recorder(model, probe_inputs=train.x[:probe]) if record else None
    g = torch.Generator().manual_seed(spec.seed)
    t0 = time.perf_counter()
    diverged_at = None
    rows: list[dict] = []
    for epoch in range(1, spec.epochs + 1):
        if diverged_at is not None:
            rows.append({**rows[-1], "epoch": epoch, "train_loss": None})
            continue
        model.train()
        perm = torch.randperm(len(train), generator=g)
        tl, tc, n = 0.0, 0, 0
        for i in range(0, len(train), spec.batch_size):
            b = perm[i:i + spec.batch_size]
            opt.zero_grad(set_to_none=True)
            out = model(train.x[b])
            loss = nn.functional.cross_entropy(out, train.y[b])
            loss.backward()
            if rec is not None:
                rec.after_backward()
            opt.step()
            lv = float(loss.detach())
            tl += lv * len(b)
            tc += int((out.argmax(1) == train.y[b]).sum())
            n += len(b)
            if not math.isfinite(lv):
                diverged_at = epoch
                break
        if rec is not None:
            rows.append(rec.end_epoch(train_loss=tl / n if diverged_at is None else float("nan"), train_accuracy=tc / n))
    wall = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        out = model(test.x)
        acc = float((out.argmax(1) == test.y).float().mean()) if torch.isfinite(out).all() and diverged_at is None else 1.0 / 10
    return {"rows": rows, "final_test_accuracy": acc, "diverged": diverged_at is not None, "wall_seconds": wall,
            "recorder_seconds": rec.seconds if rec is not None else 0.0}


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def sample_prior(domain: str, space: Mapping[str, Any], rng: np.random.Generator, *, seed: int, epochs: int) -> RunSpec:
    opt = str(rng.choice(space["optimizers"]))
    lo, hi = space["lr_range"][opt]
    wd = 0.0 if rng.random() < 0.5 else _log_uniform(rng, *space["weight_decay_range"])
    return RunSpec(domain, _log_uniform(rng, lo, hi), int(rng.choice(space["batch_sizes"])), int(rng.choice(space["widths"])),
                   int(rng.choice(space["depths"])), str(rng.choice(space["activations"])), _log_uniform(rng, *space["init_scale_range"]),
                   wd, opt, seed, epochs)


def sample_between(a: RunSpec, b: RunSpec, rng: np.random.Generator, *, seed: int) -> RunSpec:
    """Boundary interpolation between a failed run ``a`` and a successful run ``b`` (see the module docstring)."""
    def between(x: float, y: float) -> float:
        lx, ly = math.log(max(x, 1e-12)), math.log(max(y, 1e-12))
        span = abs(ly - lx)
        lo, hi = min(lx, ly) - 0.1 * span, max(lx, ly) + 0.1 * span
        return float(math.exp(rng.uniform(lo, hi))) if hi > lo else float(math.exp(lx))

    pick = lambda f: getattr(a if rng.random() < 0.5 else b, f)  # noqa: E731
    opt = pick("optimizer")
    wd = 0.0 if (a.weight_decay == 0 and b.weight_decay == 0) else between(a.weight_decay or 1e-6, b.weight_decay or 1e-6)
    return RunSpec(a.domain, between(a.lr, b.lr), pick("batch_size"), pick("width"), pick("depth"), pick("activation"),
                   between(a.init_scale, b.init_scale), wd, opt, seed, a.epochs)


def is_failure(final_test_accuracy: float, diverged: bool, threshold: float) -> bool:
    """Failure: the loss became non-finite, or the final test accuracy is below ``threshold``."""
    return bool(diverged or final_test_accuracy < threshold)


def plan_domain(domain: str, space: Mapping[str, Any], *, n_runs: int, prior_fraction: float, epochs: int, seed: int,
                prior_results: Mapping[str, tuple[float, bool]] | None = None, failure_fraction: float = 0.5) -> list[tuple[RunSpec, str]]:
    """The runs of one domain, as (spec, phase). The first ⌈prior_fraction · n_runs⌉ come from the prior; the
    rest are boundary interpolations between prior runs, which needs ``prior_results`` (run_id → (final test
    accuracy, diverged)); without it, only the prior runs are returned. Deterministic in (domain, seed, results)."""
    import zlib

    n_prior = min(n_runs, max(1, math.ceil(prior_fraction * n_runs)))
    base = [seed, zlib.crc32(domain.encode())]
    prior = [sample_prior(domain, space, np.random.default_rng([*base, i]), seed=seed * 100_000 + i, epochs=epochs) for i in range(n_prior)]
    out = [(s, "prior") for s in prior]
    if prior_results is None or n_prior == n_runs:
        return out
    done = [(s, prior_results[s.run_id]) for s in prior if s.run_id in prior_results]
    accs = [a for _, (a, _) in done]
    thr = failure_fraction * float(np.quantile(accs, 0.9)) if accs else 0.0
    failed = [s for s, (a, d) in done if is_failure(a, d, thr)]
    good = [s for s, (a, d) in done if not is_failure(a, d, thr)]
    for i in range(n_prior, n_runs):
        rng = np.random.default_rng([*base, i])
        if failed and good:
            out.append((sample_between(failed[rng.integers(len(failed))], good[rng.integers(len(good))], rng, seed=seed * 100_000 + i), "boundary"))
        else:
            out.append((sample_prior(domain, space, rng, seed=seed * 100_000 + i, epochs=epochs), "prior"))
    return out
