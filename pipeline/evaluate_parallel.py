"""Stage ``evaluate_parallel``: the multi-GPU model on data it was not fitted on — collectives on the frozen holdout
(and each NVLink system left out of the fit), DeepLearningExamples' 1 → N GPU scaling with the residual fitted on
the other models."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from pipeline.split import split_rule
from prenet.data.split_rule import assign_frame
from prenet.parallel.evaluation import collectives_summary, leave_one_system_out, scaling_summary, zero3_memory_check
from prenet.parallel.measured import measured_collectives
from prenet.parallel.model import ParallelModel
from prenet.parallel.residual import leave_one_model_out, with_residual
from prenet.paths import data_dir


def evaluate_parallel(cfg: DictConfig) -> dict:
    """Score; write ``plots/parallel_collectives.csv``, ``plots/parallel_scaling.csv`` and ``metrics/evaluate_parallel.json``."""
    model = ParallelModel.load(cfg.paths.models_parallel)
    coll = assign_frame(measured_collectives(Path(data_dir())), split_rule(cfg, key_column="key"))
    min_bytes = float(cfg.parallel.collectives.scored_min_bytes)
    holdout, table = collectives_summary(model.collectives, coll.filter(pl.col("split") == "holdout"), min_bytes)
    write_artifact(table, cfg, "plots/parallel_collectives.csv")
    rows = read_artifact(cfg, "parallel_scaling")
    lomo = leave_one_model_out(rows)
    write_artifact(lomo, cfg, "plots/parallel_scaling.csv")
    record = {
        "collectives": {
            "holdout": holdout,
            "leave_one_system_out": leave_one_system_out(coll.filter(pl.col("link") == "nvlink"), min_bytes),
            "source": model.collectives.source,
        },
        "scaling": {**scaling_summary(lomo), "fitted_residual_in_sample": scaling_summary(with_residual(rows, model.residual))},
        "fsdp_memory_vs_zero": zero3_memory_check(),
    }
    record_metrics(cfg, "evaluate_parallel", record)
    print(
        f"evaluate_parallel: collectives holdout MAPE {holdout['mape_pct']:.1f} % ({holdout['mape_pct_1mib']:.1f} % on ≥ {min_bytes / 2**20:g} MiB); "
        f"scaling T_N/T_1 MAPE {record['scaling']['mape_pct']:.1f} % (physics alone {record['scaling']['physics_mape_pct']:.1f} %)"
    )
    return record


if __name__ == "__main__":
    hydra_entry(evaluate_parallel)()
