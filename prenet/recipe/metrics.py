"""Error metrics of time predictions (ms)."""

from __future__ import annotations

import numpy as np


def error_metrics(measured_ms: np.ndarray, predicted_ms: np.ndarray) -> dict[str, float]:
    """RMSE (ms), MAPE (%), median absolute percentage error (%), fraction within ±20 %, and the count."""
    m = np.asarray(measured_ms, dtype=np.float64)
    p = np.asarray(predicted_ms, dtype=np.float64)
    if len(m) == 0:
        return {"n": 0}
    ape = np.abs(p - m) / m
    return {
        "n": int(len(m)),
        "rmse_ms": float(np.sqrt(np.mean((p - m) ** 2))),
        "mape_pct": float(100 * ape.mean()),
        "median_ape_pct": float(100 * np.median(ape)),
        "within_20pct": float(np.mean(ape <= 0.2)),
    }
