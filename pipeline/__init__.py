"""Thin stage entry points and Prefect flows over the prenet library.

Each stage is one function ``<stage>(cfg) -> dict`` in ``pipeline/<stage>.py``. It serves three callers:

* ``dvc repro`` — ``python -m pipeline.run <stage>`` loads ``params.yaml`` and calls it;
* the Hydra CLI — ``python -m pipeline.<stage> key=value ...`` composes ``conf/`` and calls it;
* Prefect — ``pipeline.flows.retrain`` runs each stage through ``dvc repro`` so DVC's record stays true.
"""

STAGES: tuple[str, ...] = (
    "benchmark",
    "benchmark_models",
    "featurize",
    "validate",
    "split",
    "train",
    "evaluate",
    "benchmark_ops",
    "train_ops",
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
