"""Per-layer-type step-time models: fit on the development rows, save, load, predict (ms)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from prenet.data.io import write_json
from prenet.steptime.features import design_matrix, from_log_target, log_target
from prenet.steptime.metrics import error_metrics
from prenet.steptime.regressors import Regressor, load_regressor, make_regressor

MANIFEST = "manifest.json"


@dataclass
class StepTimeModel:
    """One regressor per op, all of the same predictor kind and feature set."""

    predictor: str
    feature_set: str
    params: dict[str, Any]
    regressors: dict[str, Regressor] = field(default_factory=dict)
    columns: dict[str, list[str]] = field(default_factory=dict)

    def predict_ms(self, df: pl.DataFrame) -> np.ndarray:
        """Predicted ms per row of a LayerFeatures-shaped table (rows of ops without a model → error)."""
        out = np.full(df.height, np.nan)
        ops = df.get_column("op").to_numpy()
        for op in np.unique(ops):
            if op not in self.regressors:
                raise KeyError(f"no step-time model for op {op!r}; trained ops: {', '.join(sorted(self.regressors))}")
            mask = ops == op
            X, _ = design_matrix(df.filter(pl.Series(mask)), op, self.feature_set)
            out[mask] = from_log_target(self.regressors[op].predict(X))
        return out

    def save(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        files = {}
        for op, reg in self.regressors.items():
            files[op] = [p.name for p in reg.save(d / op)]
        manifest = {"predictor": self.predictor, "feature_set": self.feature_set, "params": self.params,
                    "columns": self.columns, "files": files, **(extra or {})}
        return write_json(manifest, d / MANIFEST)

    @classmethod
    def load(cls, directory: str | Path) -> "StepTimeModel":
        d = Path(directory)
        m = json.loads((d / MANIFEST).read_text())
        regs = {op: load_regressor(m["predictor"], d / op, **m["params"]) for op in m["files"]}
        return cls(m["predictor"], m["feature_set"], m["params"], regs, m["columns"])


def fit_step_time_model(
    train: pl.DataFrame,
    val: pl.DataFrame,
    *,
    predictor: str,
    params: dict[str, Any],
    feature_set: str = "ct",
    progress: bool = True,
) -> tuple[StepTimeModel, dict[str, dict[str, float]]]:
    """Fit one regressor per op on ``train`` (early stopping / checks on ``val``); return the model and the
    validation metrics per op."""
    model = StepTimeModel(predictor, feature_set, params)
    val_metrics: dict[str, dict[str, float]] = {}
    ops = sorted(train.get_column("op").unique().to_list())
    for op in tqdm(ops, desc=f"train {predictor}", unit="op", disable=not progress):
        tr = train.filter(pl.col("op") == op)
        va = val.filter(pl.col("op") == op)
        X, cols = design_matrix(tr, op, feature_set)
        Xv, _ = design_matrix(va, op, feature_set) if va.height else (None, None)
        yv = log_target(va.get_column("time_ms").to_numpy()) if va.height else None
        reg = make_regressor(predictor, **{**params, "progress": progress})
        reg.fit(X, log_target(tr.get_column("time_ms").to_numpy()), Xv, yv)
        model.regressors[op] = reg
        model.columns[op] = cols
        if va.height:
            val_metrics[op] = error_metrics(va.get_column("time_ms").to_numpy(), from_log_target(reg.predict(Xv)))
    return model, val_metrics
