"""The stages of ``dvc.yaml``, in pipeline order (the Prefect flow, the tests and the reference run use it; no stage
imports it, so adding a stage re-runs none of the others)."""

from __future__ import annotations

STAGES: tuple[str, ...] = (
    "benchmark",
    "benchmark_models",
    "featurize",
    "validate",
    "split",
    "train",
    "evaluate",
    "benchmark_ops",
    "train_gpu_ops",
    "train_ops",
    "evaluate_gpu_ops",
    "evaluate_ops",
    "train_parallel",
    "evaluate_parallel",
    "pretrain",
    "finetune",
    "forecast",
    "evaluate_convergence",
    "forecast_cost",
    "corpus",
    "train_outcome",
    "evaluate_outcome",
    "evaluate_outcome_ooc",
    "report",
)
