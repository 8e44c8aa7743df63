"""Shared fixtures: the real configuration, shrunk (experiment=tiny) and pointed at a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import torch  # noqa: E402

torch.set_num_threads(1)

from pipeline.config import compose  # noqa: E402

PATH_KEYS = {
    "shards": "raw/benchmark_shards",
    "raw_timings": "raw/local_timings.parquet",
    "hardware_record": "raw/hardware.json",
    "model_timings": "raw/model_timings.parquet",
    "step_overhead": "raw/step_overhead.json",
    "features": "features/layers.parquet",
    "validated": "validated/layers.parquet",
    "validation_report": "validated/report.json",
    "dev": "split/dev.parquet",
    "holdout": "split/holdout.parquet",
    "models": "models/steptime",
    "models_baseline": "models/steptime_baseline",
    "models_selected": "models/steptime_selected",
    "metrics": "metrics",
    "plots": "plots",
    "report": "report",
    "pretrained": "models/pretrained",
    "finetune_runs": "convergence/runs.parquet",
    "finetune_curves": "convergence/curves.parquet",
    "forecast_runs": "convergence/forecast_runs.parquet",
    "forecast_curves": "convergence/forecast_curves.parquet",
    "convergence_targets": "convergence/targets.parquet",
    "outcome_shards": "outcome/shards",
    "outcome_runs": "outcome/runs.parquet",
    "outcome_telemetry": "outcome/telemetry.parquet",
    "outcome_models": "models/outcome",
    "outcome_predictions": "outcome/holdout_predictions.parquet",
    "op_timings": "raw/op_timings.parquet",
    "gpu_op_timings": "features/gpu_ops.parquet",
    "models_ops": "models/steptime_ops",
    "distributed": "distributed",
}


def tiny_overrides(root: Path, *extra: str) -> list[str]:
    return ["experiment=tiny", "progress=false", *[f"paths.{k}={root / v}" for k, v in PATH_KEYS.items()], *extra]


@pytest.fixture
def tiny_cfg(tmp_path):
    """The real config with experiment=tiny, every output under tmp_path."""
    return compose(tiny_overrides(tmp_path))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """Every stage of the pipeline run once, in order, on the tiny config (shared by the tests that read it)."""
    import importlib

    from pipeline import STAGES

    root = tmp_path_factory.mktemp("tiny_run")
    cfg = compose(tiny_overrides(root))
    results = {}
    for stage in STAGES:
        results[stage] = getattr(importlib.import_module(f"pipeline.{stage}"), stage)(cfg)
    return root, cfg, results


#: What a scratch checkout of the project needs (tests add params.yaml or distributed/ as they need).
PROJECT_FILES = [
    "conf",
    "pipeline",
    "prenet",
    "dvc.yaml",
    "pyproject.toml",
    "data/external",
    "data/hardware",
    "data/reference",
    "data/outcome/vendored",
    ".dvc/config",
    ".dvc/.gitignore",
]


def copy_project(dst: Path, rels: list[str]) -> Path:
    """A scratch checkout: the project's ``rels`` (files or folders) copied under ``dst``, then ``git init``."""
    import shutil
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    for rel in rels:
        src, d = repo / rel, dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, d, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, d)
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    return dst
