"""Scoring predicted against real steps-to-target, on the frozen holdout of fine-tuning configurations.

For each configuration, target and curve source (``forecast``, ``corrected``, ``linear_sgd``,
``dynamics_full``, ``curve_fit``, ``probe_regressor``) the predicted step is compared with the real one:

* pairs: both reached → absolute % error |pred − real| / real (real = 0 counts as 1 step), median, mean,
  fraction within ±``within``, Spearman's ρ between predicted and real steps;
* miss rate: among configurations where at least one of (prediction, reality) reached the target, the share
  where only one did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from prenet.convergence import targets as tg


def task_regime(task_cfg: Mapping[str, Any]) -> str:
    """A convergence task's regime from its config (``in`` / ``out`` of the pre-trained features; ``unknown`` when
    not given). Torch-free, so the evaluation stage reads it without building the task."""
    return str(task_cfg.get("regime", "unknown"))


def by_curve(curves: pl.DataFrame) -> dict[tuple[str, str], pl.DataFrame]:
    """The curve table split once into {(config_id, source): rows}, for :func:`dense`."""
    return curves.partition_by(["config_id", "source"], as_dict=True)


def dense(curves: dict[tuple[str, str], pl.DataFrame], config_id: str, source: str, steps: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Loss and accuracy at steps 0..steps of one curve (linear interpolation between logged steps); ``curves`` as
    returned by :func:`by_curve`."""
    c = curves.get((config_id, source))
    if c is None or c.height == 0:
        return None
    c = c.sort("step")
    s = c["step"].to_numpy()
    L = c["loss"].fill_null(np.inf).to_numpy().astype(float)
    A = c["accuracy"].fill_null(np.nan).to_numpy().astype(float)
    t = np.arange(steps + 1)
    with np.errstate(invalid="ignore"):
        return np.interp(t, s, L), np.interp(t, s, A)


def target_list(cfg: dict, init_loss: float) -> list[tuple[str, float, float]]:
    """(kind, parameter, value): relative ε (value ε), absolute τ = fraction·L₀ (parameter fraction), accuracy."""
    out = [("relative_eps", float(e), float(e)) for e in cfg.get("relative_eps", [])]
    out += [("loss", float(f), float(f) * init_loss) for f in cfg.get("loss_fraction", [])]
    out += [("accuracy", float(a), float(a)) for a in cfg.get("accuracy", [])]
    return out


def steps_for(kind: str, value: float, loss: np.ndarray, acc: np.ndarray | None) -> int | None:
    if acc is not None and np.isnan(acc).all():
        acc = None
    return tg.steps_to(kind, loss, acc, value)


def step_error_pct(pred: int | None, real: int | None) -> float | None:
    """Absolute error of predicted steps to a target in % of the real steps; a target one side reaches and the other
    does not counts as 100 %; None where neither reaches it."""
    if real is None and pred is None:
        return None
    if real is None or pred is None:
        return 100.0
    return 100.0 * abs(pred - real) / max(real, 1)


def score(pairs: pl.DataFrame, within: float = 0.2) -> dict:
    """Metrics of a frame with columns ``real_steps`` and ``pred_steps`` (nullable = not reached)."""
    from scipy.stats import spearmanr

    if pairs.height == 0:
        return {"n": 0}
    r = pairs["real_steps"].to_numpy().astype(float)
    p = pairs["pred_steps"].to_numpy().astype(float)
    rr, pr = ~np.isnan(r), ~np.isnan(p)
    any_ = rr | pr
    both = rr & pr
    out: dict = {"n": int(pairs.height), "n_both": int(both.sum()), "miss_rate": float(((rr ^ pr) & any_).sum() / max(any_.sum(), 1))}
    if both.any():
        ape = np.abs(p[both] - r[both]) / np.maximum(r[both], 1.0)
        out.update(
            {
                "median_ape_pct": float(100 * np.median(ape)),
                "mean_ape_pct": float(100 * ape.mean()),
                "within_pct": float(100 * np.mean(ape <= within)),
            }
        )
        if both.sum() >= 3 and np.std(r[both]) > 0 and np.std(p[both]) > 0:
            out["spearman"] = float(spearmanr(r[both], p[both]).statistic)
    return out


def curve_distance(real: np.ndarray, other: np.ndarray) -> float | None:
    """Mean |L_real − L_other| / mean L_real over the horizon (None when either is not finite)."""
    if not (np.isfinite(real).all() and np.isfinite(other).all()):
        return None
    return float(np.abs(real - other).mean() / max(np.abs(real).mean(), 1e-12))


def auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """ROC AUC of ``scores`` for binary ``labels`` (Mann–Whitney); None if one class is empty."""
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return None
    gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(gt / (len(pos) * len(neg)))


def seed_noise_floor(real: pl.DataFrame, config_columns: list[str]) -> dict:
    """The measurement noise floor of steps to a target: the same configuration fine-tuned with different seeds
    (batch order, new head) reaches it after different numbers of steps. Per target: the median over
    configurations of (max − min) / mean of the real steps across seeds, in %, and how many configurations had ≥ 2
    seeds that reached it, keyed by (target kind, target parameter). ``real``: one row per (configuration, seed,
    target) with ``real_steps``; returns {} with a single seed."""
    if real.height == 0 or real["seed"].n_unique() < 2:
        return {}
    out: dict = {}
    reached = real.filter(pl.col("real_steps").is_not_null())
    for (kind, param), g in reached.group_by(["target_kind", "target_param"], maintain_order=True):
        spread = (
            g.group_by(config_columns)
            .agg(pl.col("real_steps").cast(pl.Float64).alias("s"), pl.len().alias("n"))
            .filter(pl.col("n") >= 2)
            .with_columns(((pl.col("s").list.max() - pl.col("s").list.min()) / pl.col("s").list.mean()).alias("rel"))
        )
        if spread.height:
            out[(kind, float(param))] = {"median_seed_spread_pct": float(100 * spread["rel"].median()), "configs": int(spread.height)}
    return out
