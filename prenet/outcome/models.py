"""Early-success models: XGBoost per (scope, epoch, feature set, target), trained on development runs only.

Targets: ``final_test_accuracy`` (regression), ``failure`` (binary; :func:`prenet.outcome.corpus.is_failure`
with each domain's threshold = ``failure_fraction`` × the 90th percentile of its development final accuracy),
``relative_class`` (0/1/2 = tertile of final accuracy within the domain, cut points from the development set).
Scopes: ``pooled`` (all domains) and each domain with enough development runs. Models are saved as XGBoost JSON
plus ``manifest.json`` (thresholds, cut points, feature names, residual quantiles): no pickle.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from prenet.outcome.features import FEATURE_SETS, design, feature_names

TARGETS = ("final_test_accuracy", "failure", "relative_class")


def domain_thresholds(runs: pl.DataFrame, failure_fraction: float, classes: int) -> dict[str, dict[str, Any]]:
    """Per domain, from the given (development) runs: the failure threshold and the relative-class cut points."""
    out = {}
    for (d,), g in runs.group_by(["domain"], maintain_order=True):
        acc = g["final_test_accuracy"].to_numpy()
        out[d] = {"failure_threshold": float(failure_fraction * np.quantile(acc, 0.9)),
                  "class_cuts": [float(np.quantile(acc, q)) for q in np.arange(1, classes) / classes]}
    return out


def labels(runs: pl.DataFrame, thresholds: dict[str, dict[str, Any]], pooled_fallback: dict[str, Any] | None = None) -> pl.DataFrame:
    """``runs`` with ``failure`` (0/1) and ``relative_class`` (0..k−1) computed with the frozen thresholds."""
    fail, cls = [], []
    for r in runs.iter_rows(named=True):
        t = thresholds.get(r["domain"], pooled_fallback)
        fail.append(int(bool(r["diverged"]) or r["final_test_accuracy"] < t["failure_threshold"]))
        cls.append(int(np.searchsorted(t["class_cuts"], r["final_test_accuracy"], side="right")))
    return runs.with_columns(pl.Series("failure", fail), pl.Series("relative_class", cls))


def _model(target: str, params: dict, classes: int, seed: int):
    import xgboost as xgb

    kw = dict(n_estimators=int(params["n_estimators"]), max_depth=int(params["max_depth"]), learning_rate=float(params["learning_rate"]),
              subsample=float(params["subsample"]), colsample_bytree=float(params["colsample_bytree"]), random_state=seed, n_jobs=1)
    if target == "final_test_accuracy":
        return xgb.XGBRegressor(**kw)
    if target == "failure":
        return xgb.XGBClassifier(**kw, eval_metric="logloss")
    return xgb.XGBClassifier(**kw, objective="multi:softprob", num_class=classes, eval_metric="mlogloss")


@dataclass
class Fitted:
    """One fitted model: XGBoost estimator, or a constant when the training labels had one class."""

    target: str
    model: Any = None
    constant: float | None = None
    classes: int = 2

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Accuracy (regression), failure probability (binary), or class probabilities (n × classes)."""
        if self.constant is not None:
            if self.target == "relative_class":
                p = np.zeros((len(X), self.classes))
                p[:, int(self.constant)] = 1.0
                return p
            return np.full(len(X), self.constant)
        if self.target == "final_test_accuracy":
            return self.model.predict(X)
        proba = self.model.predict_proba(X)
        return proba[:, 1] if self.target == "failure" else proba


def fit_one(target: str, X: np.ndarray, y: np.ndarray, params: dict, classes: int, seed: int) -> Fitted:
    if target != "final_test_accuracy" and len(np.unique(y)) < (2 if target == "failure" else classes):
        if target == "failure" and len(np.unique(y)) == 1:
            return Fitted(target, constant=float(y[0]), classes=classes)
        if target == "relative_class":
            # classes absent from the training labels: fall back to the majority class
            return Fitted(target, constant=float(np.bincount(y.astype(int), minlength=classes).argmax()), classes=classes)
    m = _model(target, params, classes, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(X, y)
    return Fitted(target, m, classes=classes)


def cv_residual_quantiles(X: np.ndarray, y: np.ndarray, params: dict, quantiles: list[float], seed: int, folds: int = 5) -> list[float]:
    """Quantiles of out-of-fold residuals (actual − predicted accuracy) on the development runs."""
    if len(y) < 2 * folds:
        return [float("nan")] * len(quantiles)
    idx = np.random.default_rng(seed).permutation(len(y))
    res = np.empty(len(y))
    for f in range(folds):
        te = idx[f::folds]
        tr = np.setdiff1d(idx, te)
        res[te] = y[te] - fit_one("final_test_accuracy", X[tr], y[tr], params, 3, seed).predict(X[te])
    return [float(np.quantile(res, q)) for q in quantiles]


def train_all(runs: pl.DataFrame, telemetry: pl.DataFrame, *, epochs: list[int], params: dict, classes: int, failure_fraction: float,
              min_domain_runs: int, interval: list[float], seed: int) -> tuple[dict, dict]:
    """Fit every (scope, epoch, feature set, target) on the development ``runs``. Returns (models, manifest)."""
    thr = domain_thresholds(runs, failure_fraction, classes)
    pooled = {"failure_threshold": float(np.median([t["failure_threshold"] for t in thr.values()])),
              "class_cuts": list(np.median([t["class_cuts"] for t in thr.values()], axis=0))}
    runs = labels(runs, thr)
    scopes = {"pooled": runs, **{d: g for (d,), g in runs.group_by(["domain"], maintain_order=True) if g.height >= min_domain_runs}}
    models: dict[tuple[str, int, str, str], Fitted] = {}
    quantiles: dict[str, list[float]] = {}
    for scope, g in scopes.items():
        ids = g["run_id"].to_list()
        for e in epochs:
            for fs in FEATURE_SETS:
                X = design(telemetry, ids, e, fs)
                for target in TARGETS:
                    y = g[target].to_numpy().astype(float if target == "final_test_accuracy" else int)
                    models[(scope, e, fs, target)] = fit_one(target, X, y, params, classes, seed)
                if fs == "telemetry":
                    quantiles[f"{scope}|{e}"] = cv_residual_quantiles(X, g["final_test_accuracy"].to_numpy(), params, interval, seed)
    manifest = {"epochs": epochs, "scopes": list(scopes), "feature_sets": list(FEATURE_SETS), "targets": list(TARGETS), "classes": classes,
                "thresholds": thr, "pooled_thresholds": pooled, "failure_fraction": failure_fraction, "interval_quantiles": interval,
                "residual_quantiles": quantiles, "features": {f"{e}|{fs}": feature_names(e, fs) for e in epochs for fs in FEATURE_SETS},
                "dev_runs": runs.height}
    return models, manifest


def save(models: dict, manifest: dict, folder: str | Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    consts = {}
    for (scope, e, fs, target), m in models.items():
        name = f"{scope}__e{e}__{fs}__{target}"
        if m.constant is not None:
            consts[name] = m.constant
        else:
            m.model.save_model(folder / f"{name}.json")
    (folder / "manifest.json").write_text(json.dumps({**manifest, "constants": consts}, indent=1, sort_keys=True))
    return folder


def load(folder: str | Path) -> tuple[dict, dict]:
    import xgboost as xgb

    folder = Path(folder)
    if not (folder / "manifest.json").exists():
        from prenet.errors import PrenetError

        raise PrenetError(f"no early-success models in {folder}; run the pipeline first (make run, or dvc repro train_outcome)")
    manifest = json.loads((folder / "manifest.json").read_text())
    models = {}
    for scope in manifest["scopes"]:
        for e in manifest["epochs"]:
            for fs in manifest["feature_sets"]:
                for target in manifest["targets"]:
                    name = f"{scope}__e{e}__{fs}__{target}"
                    if name in manifest["constants"]:
                        models[(scope, e, fs, target)] = Fitted(target, constant=manifest["constants"][name], classes=manifest["classes"])
                        continue
                    m = xgb.XGBRegressor() if target == "final_test_accuracy" else xgb.XGBClassifier()
                    m.load_model(folder / f"{name}.json")
                    models[(scope, e, fs, target)] = Fitted(target, m, classes=manifest["classes"])
    return models, manifest
