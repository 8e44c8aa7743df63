"""Scores of the early-success models with bootstrap 95 % intervals, and the paired ablation test."""

from __future__ import annotations

import numpy as np


def r2(y: np.ndarray, p: np.ndarray) -> float:
    sst = float(((y - y.mean()) ** 2).sum())
    return float(1 - ((y - p) ** 2).sum() / sst) if sst > 0 else float("nan")


def mae(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.abs(y - p).mean())


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (Mann–Whitney with average ranks, so ties count ½); NaN when one class is absent."""
    labels = np.asarray(labels)
    n_pos = int((labels == 1).sum())
    n_neg = int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    uniq, inv, counts = np.unique(np.asarray(scores, dtype=float), return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    avg_rank = upper - (counts - 1) / 2.0  # average 1-based rank of each distinct score
    rank_sum = float(avg_rank[inv][labels == 1].sum())
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def class_accuracy(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Share of runs whose predicted relative class is the true one."""
    return float((np.asarray(labels) == np.asarray(predicted)).mean()) if len(labels) else float("nan")


def scores(y: np.ndarray, pa: np.ndarray, yf: np.ndarray, pf: np.ndarray, yc: np.ndarray, pc: np.ndarray, n: int, seed: int) -> dict:
    """R², MAE, failure ROC AUC and relative-class accuracy, each with its bootstrap 95 % interval over runs."""
    out: dict = {"n": int(len(y)), "failures": int(np.sum(yf))}
    for name, fn, arrays in (
        ("r2", r2, [y, pa]),
        ("mae", mae, [y, pa]),
        ("failure_auc", auc, [yf, pf]),
        ("relative_class_accuracy", class_accuracy, [yc, pc]),
    ):
        pt, lo, hi = bootstrap(fn, arrays, n, seed)
        out.update({name: pt, f"{name}_low": lo, f"{name}_high": hi})
    return out


def interval_coverage(y: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """Share of runs whose final accuracy lies in [low, high]."""
    return float(((y >= low) & (y <= high)).mean()) if len(y) else float("nan")


def reliability(labels: np.ndarray, probs: np.ndarray, bins: int = 10) -> dict:
    """Reliability curve of predicted probabilities: per equal-width bin the mean prediction, the observed
    frequency and the count, plus the expected calibration error (count-weighted |observed − predicted|)."""
    edges = np.linspace(0, 1, bins + 1)
    idx = np.clip(np.digitize(probs, edges[1:-1]), 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            pm, om = float(probs[m].mean()), float(labels[m].mean())
            rows.append({"low": float(edges[b]), "high": float(edges[b + 1]), "predicted": pm, "observed": om, "n": int(m.sum())})
            ece += m.sum() * abs(om - pm)
    return {"bins": rows, "ece": float(ece / max(len(probs), 1))}


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
    return {"difference": float(point), "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5)), "p_value": float((d <= 0).mean())}
