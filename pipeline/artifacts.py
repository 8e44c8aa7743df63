"""The artifact catalog: every table that crosses a stage boundary, by its ``paths`` key (or ``plots/<file>``), with
the pandera schema that checks it on each write and read. Stages read and write tables through
:func:`read_artifact` / :func:`write_artifact`, so a table's schema is named once, here."""

from __future__ import annotations

from pathlib import Path

import pandera.polars as pa
import polars as pl
from omegaconf import DictConfig

from prenet.data.io import read_table, write_table
from prenet.data.schemas import (
    ConvergenceTargets,
    FinetuneRuns,
    ForecastRuns,
    HoldoutPredictions,
    LayerFeatures,
    LossCurves,
    ModelTimings,
    OpPredictions,
    OpTimings,
    OutcomeRuns,
    OutcomeTelemetry,
    ParallelScaling,
    RawTimings,
    SplitLayerFeatures,
)

#: artifact → schema. ``None``: checked by the stage that reads it (``features``: the ``validate`` stage collects
#: every failure into its report instead of stopping at the first) or a free-form table of the report.
SCHEMAS: dict[str, type[pa.DataFrameModel] | None] = {
    "raw_timings": RawTimings,
    "model_timings": ModelTimings,
    "model_timings_bf16": ModelTimings,
    "op_timings": OpTimings,
    "gpu_op_timings": OpTimings,
    "features": None,
    "validated": LayerFeatures,
    "dev": SplitLayerFeatures,
    "holdout": SplitLayerFeatures,
    "finetune_runs": FinetuneRuns,
    "finetune_curves": LossCurves,
    "forecast_runs": ForecastRuns,
    "forecast_curves": LossCurves,
    "convergence_targets": ConvergenceTargets,
    "outcome_runs": OutcomeRuns,
    "outcome_telemetry": OutcomeTelemetry,
    "outcome_predictions": None,
    "plots/holdout_predictions.csv": HoldoutPredictions,
    "plots/zoo_predictions.csv": None,
    "plots/unseen_hardware.csv": None,
    "plots/selection_grid.csv": None,
    "plots/op_holdout.csv": None,
    "plots/op_holdout_gpu.csv": OpPredictions,
    "plots/op_unseen_gpu.csv": None,
    "plots/op_zoo.csv": None,
    "plots/op_dle.csv": None,
    "plots/op_torchvision.csv": None,
    "plots/op_neusight_e2e.csv": None,
    "plots/op_hf_parity.csv": None,
    "plots/op_neusight_unseen.csv": None,
    "plots/memory_zoo.csv": None,
    "parallel_scaling": ParallelScaling,
    "plots/parallel_collectives.csv": None,
    "plots/parallel_scaling.csv": None,
}


def artifact(cfg: DictConfig, name: str) -> Path:
    """The file of catalog entry ``name`` under ``cfg.paths`` (``plots/<file>`` lives in ``paths.plots``)."""
    if name not in SCHEMAS:
        raise KeyError(f"{name!r} is not in the artifact catalog (pipeline/artifacts.py: SCHEMAS); add it there with its schema")
    folder, _, file = name.partition("/")
    return Path(cfg.paths[folder]) / file if file else Path(cfg.paths[name])


def read_artifact(cfg: DictConfig, name: str) -> pl.DataFrame:
    """Read catalog entry ``name`` and validate it against its schema."""
    return read_table(artifact(cfg, name), SCHEMAS[name])


def write_artifact(df: pl.DataFrame, cfg: DictConfig, name: str) -> Path:
    """Validate ``df`` against entry ``name``'s schema and write it atomically."""
    return write_table(df, artifact(cfg, name), SCHEMAS[name])
