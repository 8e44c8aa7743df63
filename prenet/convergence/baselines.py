"""Baselines of the convergence predictor, evaluated in the same run.

* :func:`curve_fit_forecast` — parametric learning-curve extrapolation: fit L(t) = a + b·e^(−c t) and
  L(t) = a + b·(t + 1)^(−c) (least squares, SciPy) to the first ``fraction`` of the *real* curve, keep the
  better fit, extrapolate to the horizon. It costs ``fraction`` of the real fine-tuning.
* :class:`ProbeRegressor` — a regressor on one-batch features (initial loss, gradient norm on the first
  batch, parameter count, lr, momentum, batch size, loss kind, classes, N) → ln(steps to a target), trained
  on the development configurations only (XGBoost, small trees).
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

PROBE_FEATURES = ("init_loss", "grad_norm", "n_params", "lr", "momentum", "batch_size", "is_mse", "classes", "n_train")


def curve_fit_forecast(loss: np.ndarray, steps: int, fraction: float) -> np.ndarray:
    """Extrapolated loss for steps 0..steps from the real ``loss`` at steps 0..⌈fraction·steps⌉."""
    from scipy.optimize import curve_fit

    k = max(3, int(np.ceil(fraction * steps)))
    t = np.arange(k + 1, dtype=float)
    L = np.asarray(loss[: k + 1], dtype=float)
    T = np.arange(steps + 1, dtype=float)
    if not np.isfinite(L).all():
        return np.full(steps + 1, np.inf)
    span = max(float(L[0] - L[-1]), 1e-12)
    models = {
        "exp": (lambda t, a, b, c: a + b * np.exp(-c * t), (float(L[-1]), span, 1.0 / k)),
        "power": (lambda t, a, b, c: a + b * (t + 1.0) ** (-c), (float(L[-1]) * 0.5, span, 0.5)),
    }
    best, best_sse = None, np.inf
    for f, p0 in models.values():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p, _ = curve_fit(f, t, L, p0=p0, maxfev=5000, bounds=([-np.inf, -np.inf, 0.0], [np.inf, np.inf, np.inf]))
            except (RuntimeError, ValueError):
                continue
        sse = float(((f(t, *p) - L) ** 2).sum())
        if sse < best_sse:
            best, best_sse = (f, p), sse
    if best is None:
        return np.concatenate([L, np.full(steps - k, L[-1])])
    f, p = best
    out = f(T, *p)
    out[: k + 1] = L
    return out


def curve_fit_item(item: tuple[np.ndarray, int, float]) -> np.ndarray:
    """:func:`curve_fit_forecast` of (loss, steps, fraction) (picklable, for a process pool's ``map``)."""
    return curve_fit_forecast(*item)


class ProbeRegressor:
    """ln(steps to a target) from one-batch features; fitted on development configurations only."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.model = None

    @staticmethod
    def features(df: pl.DataFrame) -> np.ndarray:
        d = df.with_columns((pl.col("loss") == "mse").cast(pl.Float64).alias("is_mse"))
        return d.select([pl.col(c).cast(pl.Float64) for c in PROBE_FEATURES]).fill_null(np.nan).to_numpy()

    def fit(self, df: pl.DataFrame, steps: np.ndarray) -> "ProbeRegressor":
        import xgboost as xgb

        self.model = xgb.XGBRegressor(n_estimators=200, max_depth=3, learning_rate=0.05, subsample=0.9, random_state=self.seed, n_jobs=1)
        self.model.fit(self.features(df), np.log(np.maximum(steps, 1)))
        return self

    def predict(self, df: pl.DataFrame) -> np.ndarray:
        return np.rint(np.exp(self.model.predict(self.features(df)))).astype(int)
