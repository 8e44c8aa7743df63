"""Scores of the early-success models with bootstrap 95 % intervals, and the paired ablation test."""

from __future__ import annotations

import numpy as np


def r2(y: np.ndarray, p: np.ndarray) -> float:
    sst = float(((y - y.mean()) ** 2).sum())
    return float(1 - ((y - p) ** 2).sum() / sst) if sst > 0 else float("nan")


def mae(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.abs(y - p).mean())


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (Mann–Whitney, ties count ½); NaN when one class is absent."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg)))


def bootstrap(fn, arrays: list[np.ndarray], n: int, seed: int) -> tuple[float, float, float]:
    """(point, low, high): the statistic and its percentile 95 % interval over ``n`` resamples of the rows."""
    point = fn(*arrays)
    rng = np.random.default_rng(seed)
    m = len(arrays[0])
    vals = []
    for _ in range(n):
        idx = rng.integers(0, m, m)
        v = fn(*[a[idx] for a in arrays])
        if np.isfinite(v):
            vals.append(v)
    if not vals:
        return point, float("nan"), float("nan")
    return point, float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def paired_difference(fn, y: np.ndarray, a: np.ndarray, b: np.ndarray, n: int, seed: int) -> dict:
    """fn(y, a) − fn(y, b) with a paired bootstrap (the same resampled runs for both): mean difference, 95 %
    interval and the one-sided p-value P(difference ≤ 0)."""
    rng = np.random.default_rng(seed)
    m = len(y)
    diffs = []
    for _ in range(n):
        idx = rng.integers(0, m, m)
        d = fn(y[idx], a[idx]) - fn(y[idx], b[idx])
        if np.isfinite(d):
            diffs.append(d)
    point = fn(y, a) - fn(y, b)
    if not diffs:
        return {"difference": point, "low": float("nan"), "high": float("nan"), "p_value": float("nan")}
    d = np.array(diffs)
    return {"difference": float(point), "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5)),
            "p_value": float((d <= 0).mean())}
