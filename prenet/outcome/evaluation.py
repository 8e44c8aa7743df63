"""Scores of the early-success models with bootstrap 95 % intervals, and the paired ablation test."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def r2(y: np.ndarray, p: np.ndarray) -> float:
    sst = float(((y - y.mean()) ** 2).sum())
    return float(1 - ((y - p) ** 2).sum() / sst) if sst > 0 else float("nan")


def mae(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.abs(y - p).mean())


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (Mann–Whitney: ties count ½) of the rows labelled 0 or 1 (any other label, e.g. NaN for an unknown
    outcome, is left out); NaN when one class is absent. The one resample of every row of :func:`_auc_rows`."""
    labels = np.asarray(labels)
    return float(_auc_rows(labels, np.asarray(scores), np.arange(len(labels))[None, :])[0])


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


def _r2_rows(y: np.ndarray, p: np.ndarray, idx: np.ndarray) -> np.ndarray:
    y, p = y[idx], p[idx]
    sst = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sst > 0, 1 - ((y - p) ** 2).sum(axis=1) / sst, np.nan)


def _auc_rows(labels: np.ndarray, scores: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """:func:`auc` of each resample (a row of ``idx``), from how often it draws each (distinct score, class): the pairs
    a positive ranks above a negative, ties counting ½, over n_pos · n_neg (exact: the rank-sum statistic)."""
    uniq, inv = np.unique(np.asarray(scores, dtype=float), return_inverse=True)
    k, n = len(uniq), len(idx)
    cls = np.where(labels == 1, 1, np.where(labels == 0, 0, 2))  # 2: neither class
    key = inv[idx] + k * cls[idx] + 3 * k * np.arange(n)[:, None]
    counts = np.bincount(key.ravel(), minlength=3 * k * n).reshape(n, 3, k)
    neg, pos = counts[:, 0, :], counts[:, 1, :]
    below = np.cumsum(neg, axis=1) - neg
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), (pos * (below + 0.5 * neg)).sum(axis=1) / (n_pos * n_neg), np.nan)


#: row-wise forms of the statistics, for :func:`resampled`: (arrays..., resampling indices, resamples × rows) -> one
#: value per resample, 1,000 resamples in one pass
ROWWISE: dict[Callable, Callable[..., np.ndarray]] = {
    r2: _r2_rows,
    mae: lambda y, p, idx: np.abs(y[idx] - p[idx]).mean(axis=1),
    auc: _auc_rows,
    class_accuracy: lambda y, p, idx: (y[idx] == p[idx]).mean(axis=1),
}


def resampled(fn: Callable, arrays: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
    """``fn`` of ``arrays`` on each row of resampling indices ``idx`` (resamples × rows), row-wise where
    :data:`ROWWISE` has ``fn``'s form, else one call per resample."""
    arrays = [np.asarray(a) for a in arrays]
    if fn in ROWWISE:
        return np.asarray(ROWWISE[fn](*arrays, idx), dtype=float)
    return np.array([fn(*[a[i] for a in arrays]) for i in idx], dtype=float)


def bootstrap(fn, arrays: list[np.ndarray], n: int, seed: int) -> tuple[float, float, float]:
    """(point, low, high): the statistic and its percentile 95 % interval over ``n`` resamples of the rows."""
    point = fn(*arrays)
    m = len(arrays[0])
    vals = resampled(fn, arrays, np.random.default_rng(seed).integers(0, m, (n, m)))
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return point, float("nan"), float("nan")
    return point, float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def paired_difference(fn, y: np.ndarray, a: np.ndarray, b: np.ndarray, n: int, seed: int) -> dict:
    """fn(y, a) − fn(y, b) with a paired bootstrap (the same resampled runs for both): mean difference, 95 %
    interval and the one-sided p-value P(difference ≤ 0)."""
    m = len(y)
    idx = np.random.default_rng(seed).integers(0, m, (n, m))
    d = resampled(fn, [y, a], idx) - resampled(fn, [y, b], idx)
    d = d[np.isfinite(d)]
    point = fn(y, a) - fn(y, b)
    if not len(d):
        return {"difference": point, "low": float("nan"), "high": float("nan"), "p_value": float("nan")}
    return {"difference": float(point), "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5)), "p_value": float((d <= 0).mean())}
