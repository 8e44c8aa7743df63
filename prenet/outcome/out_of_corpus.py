"""Runs no part of the early-success pipeline was fitted on (issue 29): a plain torch loop over scikit-learn's digits,
written as a user writes it, recorded with :class:`~prenet.telemetry.Recorder`, and the predictor's answers on them at
epochs 1, 2, 3 and 5 with nothing stated. Two priors (:data:`PRIORS`):

- ``user_loop``: MLPs of 1-3 hidden layers of 16-256 units, ReLU or tanh, init scales 0.1-5, SGD with learning rates
  10^-3.5 to 10^0.7 and heavy-ball momentum 0 / 0.5 / 0.9 / 0.99, batches 16-128. Outside the corpus prior when it was
  drawn; inside the ranges of the corpus's ``user_loop`` recipe since 2026-12-05.
- ``beyond``: settings outside every corpus recipe's ranges — MLPs of 4-5 hidden layers of 32-512 units with GELU, ELU
  or LeakyReLU (the corpus: 1-3 layers, ReLU or tanh); SGD with Nesterov momentum 0.95 (lr 10^-3 to 10^0) or RMSprop
  (lr 10^-4.5 to 10^-1.5), neither in the corpus; batches 8-256 (the corpus: 16-128); init scales 0.3-3 for half the
  runs and 0.01-0.03 or 8-16 for the other half (the corpus: 0.03-8).

A run is a **late bloomer** when its accuracy is below 0.5 after 2 epochs and at or above 0.8 at the end.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl

from prenet.names import OOC_ACTIVATIONS, OOC_OPTIMIZERS, OOC_PRIORS
from prenet.outcome.models import LATE_BLOOMER, accuracy_at

#: the epochs the answers are scored at (the outcome models' own epochs at or below these answer)
EPOCHS_SCORED = (1, 2, 3, 5)


#: The out-of-corpus priors :func:`sample_specs` draws from (module docstring).
PRIORS = OOC_PRIORS


@dataclass(frozen=True)
class OocSpec:
    """One out-of-corpus run: hidden ``width`` × ``depth``, ``activation`` (:data:`~prenet.names.OOC_ACTIVATIONS`), ``init_scale`` (×
    torch's default init), ``optimizer`` (:data:`~prenet.names.OOC_OPTIMIZERS`) with its ``lr`` and ``momentum``, ``batch``, ``epochs``,
    ``seed``."""

    run_id: str
    width: int
    depth: int
    activation: str
    init_scale: float
    lr: float
    momentum: float
    batch: int
    epochs: int
    seed: int
    optimizer: str = "sgd"


def sample_specs(n: int, seed: int, epochs: int = 10, prior: str = "user_loop") -> list[OocSpec]:
    """``n`` run settings drawn from the out-of-corpus ``prior`` (:data:`PRIORS`, module docstring), reproducibly from
    ``seed``."""
    if prior not in PRIORS:
        raise ValueError(f"out-of-corpus prior {prior!r}: choose one of {', '.join(PRIORS)}")
    if prior == "beyond":
        return _sample_beyond(n, seed, epochs)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append(
            OocSpec(
                run_id=f"ooc-{seed}-{i:03d}",
                width=int(2 ** rng.integers(4, 9)),
                depth=int(rng.integers(1, 4)),
                activation=str(rng.choice(["relu", "tanh"])),
                init_scale=float(10 ** rng.uniform(-1, math.log10(5))),
                lr=float(10 ** rng.uniform(-3.5, 0.7)),
                momentum=float(rng.choice([0.0, 0.5, 0.9, 0.99])),
                batch=int(2 ** rng.integers(4, 8)),
                epochs=epochs,
                seed=seed * 1000 + i,
            )
        )
    return out


def _sample_beyond(n: int, seed: int, epochs: int) -> list[OocSpec]:
    """:func:`sample_specs` of the ``beyond`` prior (module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        optimizer = str(rng.choice(list(OOC_OPTIMIZERS[1:])))  # Nesterov or RMSprop: not heavy-ball SGD
        lr = 10 ** rng.uniform(-3.0, 0.0) if optimizer == "nesterov" else 10 ** rng.uniform(-4.5, -1.5)
        kind = rng.integers(0, 4)  # half inside the corpus's init scales, a quarter below, a quarter above
        low, high = {0: (0.3, 3.0), 1: (0.3, 3.0), 2: (0.01, 0.03), 3: (8.0, 16.0)}[int(kind)]
        out.append(
            OocSpec(
                run_id=f"beyond-{seed}-{i:03d}",
                width=int(2 ** rng.integers(5, 10)),
                depth=int(rng.integers(4, 6)),
                activation=str(rng.choice(list(OOC_ACTIVATIONS[2:]))),  # GELU, ELU, LeakyReLU: not ReLU or tanh
                init_scale=float(10 ** rng.uniform(math.log10(low), math.log10(high))),
                lr=float(lr),
                momentum=0.95 if optimizer == "nesterov" else 0.0,
                batch=int(2 ** rng.integers(3, 9)),
                epochs=epochs,
                seed=seed * 1000 + i,
                optimizer=optimizer,
            )
        )
    return out


def digits_splits(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's digits (8 × 8 → 64 features in [0, 1], 10 classes) split 60 / 20 / 20 into train / val / test."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(y))
    x, y = (x[idx] / 16.0).astype(np.float32), y[idx].astype(np.int64)
    a, b = int(0.6 * len(y)), int(0.8 * len(y))
    return {"train": (x[:a], y[:a]), "val": (x[a:b], y[a:b]), "test": (x[b:], y[b:])}


def train_run(spec: OocSpec, data: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[pl.DataFrame, float, bool]:
    """Train one run as a user's loop does; (its Recorder table, final test accuracy, whether it diverged: a
    non-finite loss, after which training stops and the run counts as failed at chance accuracy)."""
    import torch
    from torch import nn

    from prenet.telemetry import Recorder

    torch.manual_seed(spec.seed)
    act = dict(zip(OOC_ACTIVATIONS, (nn.ReLU, nn.Tanh, nn.GELU, nn.ELU, nn.LeakyReLU)))[spec.activation]
    layers: list[nn.Module] = []
    d = 64
    for _ in range(spec.depth):
        layers += [nn.Linear(d, spec.width), act()]
        d = spec.width
    model = nn.Sequential(*layers, nn.Linear(d, 10))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(spec.init_scale)
    if spec.optimizer == "rmsprop":
        opt: torch.optim.Optimizer = torch.optim.RMSprop(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum, nesterov=spec.optimizer == "nesterov")
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = (torch.from_numpy(a) for a in data["train"])
    xv, yv = (torch.from_numpy(a) for a in data["val"])
    xs, ys = (torch.from_numpy(a) for a in data["test"])
    rec = Recorder(model, probe_inputs=xv[:64], optimizer=opt)
    gen = torch.Generator().manual_seed(spec.seed)
    diverged = False
    for _epoch in range(spec.epochs):
        order = torch.randperm(len(yt), generator=gen)
        total, correct, seen = 0.0, 0, 0
        for k in range(0, len(yt), spec.batch):
            i = order[k : k + spec.batch]
            opt.zero_grad()
            out = model(xt[i])
            loss = loss_fn(out, yt[i])
            if not torch.isfinite(loss):
                diverged = True
                break
            loss.backward()
            rec.after_backward(loss)
            opt.step()
            total += loss.item() * len(i)
            correct += int((out.argmax(1) == yt[i]).sum())
            seen += len(i)
        if diverged or seen == 0:
            break
        with torch.no_grad():
            vo = model(xv)
            vl = float(loss_fn(vo, yv))
            va = float((vo.argmax(1) == yv).float().mean())
        if not math.isfinite(vl):
            diverged = True
            break
        rec.end_epoch(train_loss=total / seen, train_accuracy=correct / seen, val_loss=vl, val_accuracy=va)
    with torch.no_grad():
        final = 0.1 if diverged else float((model(xs).argmax(1) == ys).float().mean())
    return rec.table(), final, diverged


#: Offset of the training seed of the repeated runs (:func:`collect` ``reseed``): the same settings, another init and
#: batch order.
RESEED = 500_000


def collect(n: int, seed: int, epochs: int = 10, reseed: int = 0, prior: str = "user_loop") -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs: one row per run with its settings, ``final_test_accuracy`` and ``diverged``; telemetry: the Recorder rows
    of every run, with ``run_id``) of ``n`` runs from ``prior`` (:func:`sample_specs`). ``reseed``: added to every
    run's training seed (the settings stay those of ``seed``)."""
    data = digits_splits(seed)
    runs, tels = [], []
    for spec in sample_specs(n, seed, epochs, prior):
        spec = replace(spec, seed=spec.seed + reseed)
        table, final, diverged = train_run(spec, data)
        runs.append({**asdict(spec), "final_test_accuracy": final, "diverged": diverged, "epochs_recorded": table.height})
        if table.height:
            tels.append(table.with_columns(pl.lit(spec.run_id).alias("run_id")))
    return pl.DataFrame(runs), pl.concat(tels, how="diagonal") if tels else pl.DataFrame()


def seed_ceiling(runs: pl.DataFrame, repeats: pl.DataFrame) -> dict[str, float]:
    """How much of the final accuracy's variance no prediction from a run's settings can explain: ``repeats`` are the
    same settings trained again with another seed (``run_id``, ``final_test_accuracy``). With y_a, y_b the two final
    accuracies of one setting, E[(y_a − y_b)²] / 2 estimates the seed variance Var(y | settings), so
    ``r2_ceiling`` = 1 − mean((y_a − y_b)²) / (2 Var(y)) is the R² of an oracle that knows each setting's expected
    outcome exactly (telemetry sees more than the settings, the run's own seed at work, so it is a yardstick, not a
    bound); ``mean_abs_difference`` = mean |y_a − y_b|."""
    j = runs.select("run_id", "final_test_accuracy").join(repeats.select("run_id", pl.col("final_test_accuracy").alias("b")), on="run_id")
    a, b = j["final_test_accuracy"].to_numpy(), j["b"].to_numpy()
    var = float(np.var(np.concatenate([a, b])))
    return {
        "runs": j.height,
        "r2_ceiling": 1.0 - float(np.mean((a - b) ** 2)) / (2.0 * var) if var > 0 else float("nan"),
        "mean_abs_difference": float(np.mean(np.abs(a - b))),
    }


def failed(threshold: float) -> pl.Expr:
    """Whether an out-of-corpus run failed (column ``failure``, 0/1): it diverged, or its final accuracy is below the
    models' pooled failure ``threshold``."""
    return (pl.col("diverged") | (pl.col("final_test_accuracy") < threshold)).cast(pl.Int64).alias("failure")


def late_bloomers(runs: pl.DataFrame, telemetry: pl.DataFrame) -> np.ndarray:
    """Per run (in ``runs`` order): a :data:`~prenet.outcome.models.LATE_BLOOMER` — its accuracy after 2 epochs
    (:func:`~prenet.outcome.models.accuracy_at`) below 0.5, and ≥ 0.8 at the end."""
    at2 = accuracy_at(runs, telemetry, LATE_BLOOMER["epoch"])
    return (at2 < LATE_BLOOMER["below"]) & (runs["final_test_accuracy"].to_numpy() >= LATE_BLOOMER["final_at_least"])


def late_bloomer_share(runs: pl.DataFrame, telemetry: pl.DataFrame) -> float:
    """Share of :func:`late_bloomers` among ``runs``."""
    late = late_bloomers(runs, telemetry)
    return float(late.mean()) if len(late) else float("nan")


def score(runs: pl.DataFrame, telemetry: pl.DataFrame, models_dir: str | Path, *, n_boot: int, seed: int) -> dict[str, Any]:
    """The predictor (nothing stated: unknown domain, no schedule) on the runs at each of :data:`EPOCHS_SCORED`:
    R², MAE and failure AUC with 95 % bootstrap intervals, beside the naive guess (the epoch's validation accuracy);
    how honest its uncertainty is (interval coverage, overall and on the late bloomers, the intervals' widths on runs
    it flags as possibly taking off and on the others, the failure probability's reliability curve and ECE); and how
    its take-off flag calls the late bloomers (and the take-off probability's AUC of success among the runs still slow).
    Failure = diverged or final accuracy below the models' pooled failure
    threshold."""
    from prenet.outcome.evaluation import auc, bootstrap, interval_coverage, mae, r2, reliability
    from prenet.outcome.models import interval_bounds, load, residual_key
    from prenet.outcome.predict import predict

    loaded = load(models_dir)
    manifest = loaded[1]
    threshold = float(manifest["pooled_thresholds"]["failure_threshold"])
    y = runs["final_test_accuracy"].to_numpy()
    fail = runs.select(failed(threshold))["failure"].to_numpy().astype(float)
    late = late_bloomers(runs, telemetry)
    q = manifest.get("interval_quantiles", [0.1, 0.9])
    out: dict[str, Any] = {"runs": runs.height, "failure_threshold": threshold, "failures": int(fail.sum()), "by_epoch": {}}
    for e in EPOCHS_SCORED:
        pa, pf, guess, ok, lo, hi, flag, pt = [], [], [], [], [], [], [], []
        for rid in runs["run_id"].to_list():
            t = telemetry.filter((pl.col("run_id") == rid) & (pl.col("epoch") <= e)).drop("run_id")
            if t.height < e:  # diverged before epoch e: its failure is already visible
                pa.append(0.1)
                pf.append(1.0)
                guess.append(0.1)
                ok.append(False)
                lo.append(0.1)
                hi.append(0.1)
                flag.append(False)
                pt.append(float("nan"))
                continue
            o = predict(t, loaded=loaded)
            pa.append(o.final_test_accuracy)
            pf.append(o.failure_probability)
            lo.append(o.interval[0])
            hi.append(o.interval[1])
            flag.append(o.may_take_off)
            pt.append(o.take_off_probability if o.take_off_probability is not None else float("nan"))
            last = t.filter(pl.col("epoch") == e)
            guess.append(float(last["val_accuracy"][0]) if last["val_accuracy"][0] is not None else float(last["train_accuracy"][0]))
            ok.append(True)
        pa_, pf_, g_, lo_, hi_, fl = np.array(pa), np.array(pf), np.array(guess), np.array(lo), np.array(hi), np.array(flag)
        m: dict[str, Any] = {"answered": int(sum(ok))}
        for name, (fn, arrays) in {
            "r2": (r2, [y, pa_]),
            "mae": (mae, [y, pa_]),
            "failure_auc": (auc, [fail, pf_]),
            "naive_r2": (r2, [y, g_]),
            "naive_failure_auc": (auc, [fail, 1.0 - g_]),
        }.items():
            m[name] = list(bootstrap(fn, arrays, n_boot, seed))
        width = hi_ - lo_
        m["interval"] = {
            "nominal": float(q[-1] - q[0]),
            "coverage": interval_coverage(y, lo_, hi_),
            "coverage_late_bloomers": interval_coverage(y[late], lo_[late], hi_[late]),
            "median_width_flagged": float(np.median(width[fl])) if fl.any() else None,
            "median_width_others": float(np.median(width[~fl])) if (~fl).any() else None,
        }
        m["failure_reliability"] = reliability(fail, pf_)
        m["take_off_flag"] = {
            "flagged": int(fl.sum()),
            "late_bloomers": int(late.sum()),
            "late_bloomers_flagged": int((fl & late).sum()),
            "flagged_that_reached_0.8": int((fl & (y >= LATE_BLOOMER["final_at_least"])).sum()),
        }
        pt_ = np.array(pt)
        slow = np.isfinite(pt_)  # the runs still slow at e, which the take-off model answered
        m["take_off_auc"] = {
            "runs": int(slow.sum()),
            "auc": float(auc(1.0 - fail[slow], pt_[slow])) if slow.any() and len(np.unique(fail[slow])) == 2 else None,
        }
        # the same runs as a plain training log would give them (no Recorder: losses and accuracies only), answered by
        # the same model (features.PLAIN_LOG is masked in its training copies)
        e_model = max(k for k in manifest["epochs"] if k <= e)  # the model predict() answers with
        plain = np.where(np.array(ok), _plain_log_accuracy(loaded[0], runs, telemetry, e_model), pa_)
        m["plain_log_r2"] = list(bootstrap(r2, [y, plain], n_boot, seed))
        pkey = residual_key(e_model, False, plain=True)
        if pkey in manifest.get("residual_quantiles", {}):  # as predict() bounds a plain log's answer
            plo, phi = interval_bounds(plain, manifest["residual_quantiles"][pkey], manifest.get("residual_bands", {}).get(pkey))
            plo, phi = np.where(ok, plo, lo_), np.where(ok, phi, hi_)
            m["interval"]["plain_log_coverage"] = interval_coverage(y, plo, phi)
        out["by_epoch"][str(e)] = m
    out["late_bloomer_share"] = late_bloomer_share(runs, telemetry)
    return out


def answered_unstated(runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int) -> tuple[np.ndarray, pl.DataFrame]:
    """(which of ``runs`` have ``epoch`` epochs recorded, those runs with their domain and schedule unstated): the
    runs a refit answers at ``epoch`` as a user's call with nothing stated."""
    answered = set(telemetry.filter(pl.col("epoch") == epoch)["run_id"].to_list())
    mask = np.array([rid in answered for rid in runs["run_id"].to_list()], dtype=bool)
    hold = runs.filter(pl.Series(mask)).with_columns(pl.lit(None, dtype=pl.String).alias("domain"), pl.lit(None, dtype=pl.String).alias("schedule"))
    return mask, hold


def _plain_log_accuracy(models: dict, runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int) -> np.ndarray:
    """The pooled model of ``epoch``'s final accuracy for ``runs`` (nothing stated) as plain training logs would give
    them (:func:`~prenet.outcome.features.as_plain_log`: the same features as their telemetry cut down to
    :data:`~prenet.outcome.telemetry_input.PLAIN_LOG_COLUMNS`, checked 2026-12-06 on these runs)."""
    from prenet.outcome.features import as_plain_log, design

    X = as_plain_log(design(telemetry, runs["run_id"].to_list(), epoch, "telemetry"), epoch)
    return models[("pooled", epoch, "telemetry", "final_test_accuracy")].predict(X)


def ablate_on(
    runs: pl.DataFrame,
    telemetry: pl.DataFrame,
    dev: pl.DataFrame,
    dev_telemetry: pl.DataFrame,
    models_dir: str | Path,
    *,
    epoch: int,
    groups: list[str],
    params: dict,
    n_boot: int,
    seed: int,
    mapper: Callable = map,
) -> dict[str, Any]:
    """Each of ``groups`` dropped in turn from a model refitted on the corpus development runs ``dev``, scored on the
    out-of-corpus ``runs`` answered with nothing stated at ``epoch`` (those with ``epoch`` epochs recorded): R² and
    failure AUC of the full model minus the model without the group, paired bootstrap (positive = the group helps).
    Labels use the trained models' thresholds. ``mapper(fn, items)`` runs the refits (``map``, or a pool's)."""
    from prenet.outcome.crossval import ablate_groups
    from prenet.outcome.models import labels, load

    manifest = load(models_dir)[1]
    thr, pooled = manifest["thresholds"], manifest["pooled_thresholds"]
    hold = answered_unstated(runs, telemetry, epoch)[1].with_columns(failed(float(pooled["failure_threshold"])))
    out = ablate_groups(
        labels(dev, thr, pooled),
        hold,
        dev_telemetry,
        epoch,
        params=params,
        n_boot=n_boot,
        seed=seed,
        groups=groups,
        hold_telemetry=telemetry,
        stated=False,
        mapper=mapper,
    )
    return {"epoch": epoch, "runs": hold.height, "groups": out}


def seed_spread(
    runs: pl.DataFrame,
    telemetry: pl.DataFrame,
    dev: pl.DataFrame,
    dev_telemetry: pl.DataFrame,
    models_dir: str | Path,
    *,
    epochs: list[int],
    seeds: list[int],
    params: dict,
    mapper: Callable = map,
    known: dict[int, dict[int, float]] | None = None,
) -> dict[str, Any]:
    """How much of the out-of-corpus R² is the fit's own randomness: the pooled accuracy model refitted on the corpus
    development runs ``dev`` with each of ``seeds`` (XGBoost's row and column sampling, and which copies of a run mask
    what a user may not state), answered with nothing stated at each of ``epochs`` on ``runs`` (a run diverged before
    the epoch answered 0.1, as :func:`score` answers it); with a seed bag (``params["bag"]`` = k) each refit is a bag
    of seeds s … s + k − 1, so give ``seeds`` k apart. Returns, per epoch, the R² of each seed's refit and their
    range. The trained models are one of these fits (the stage's ``seed``): the headline figure is one draw of this
    spread, not its centre. ``known`` ({seed: {epoch: R²}}) gives the seeds already fitted and scored (the trained
    models, by :func:`score`), taken as given rather than refitted (a refit reproduces them to 1e-9: a test holds it).
    ``mapper(fn, items)`` runs the refits (``map``, or a process pool's)."""
    from prenet.outcome.crossval import fit_and_answer
    from prenet.outcome.evaluation import r2
    from prenet.outcome.models import labels, load

    manifest = load(models_dir)[1]
    thr, pooled = manifest["thresholds"], manifest["pooled_thresholds"]
    train = labels(dev, thr, pooled)
    y = runs["final_test_accuracy"].to_numpy()
    out: dict[str, Any] = {"seeds": list(seeds), "by_epoch": {}}
    masks, items = {}, []
    nothing = {"known_domain": False, "known_schedule": False}
    known = known or {}
    fit = {e: [s for s in seeds if e not in known.get(s, {})] for e in epochs}
    for e in epochs:
        masks[e], hold = answered_unstated(runs, telemetry, e)
        # the bag params["bag"] gives, its accuracy model stacked with a take-off model refitted alongside, as trained
        accuracy = {"targets": ("final_test_accuracy",), "stack": manifest.get("take_off", {}).get("stack", {}).get(str(e))}
        items += [(train, dev_telemetry, hold, telemetry, e, params, int(s), (), accuracy, nothing) for s in fit[e]]
    answers = iter(list(mapper(fit_and_answer, items)))  # run to the end: a pool's generator closes its processes
    for e in epochs:
        scores = []
        for s in seeds:
            if s not in fit[e]:
                scores.append(float(known[s][e]))
                continue
            pred = np.full(len(y), 0.1)  # a run diverged before the epoch, as score() answers it
            pred[masks[e]] = next(answers)["final_test_accuracy"]
            scores.append(float(r2(y, pred)))
        out["by_epoch"][str(e)] = {"r2": scores, "min": min(scores), "max": max(scores)}
    return out
