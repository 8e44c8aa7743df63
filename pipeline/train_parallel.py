"""Stage ``train_parallel``: the multi-GPU model — collectives fitted on the measured collectives outside the frozen
holdout, and the data-parallel residual fitted on DeepLearningExamples' 1 → N GPU scaling rows."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.split import split_rule
from prenet.data.split_rule import assert_no_holdout, assign_frame
from prenet.parallel.collectives import fit
from prenet.parallel.measured import measured_collectives
from prenet.parallel.model import ParallelModel, SyncResidual
from prenet.parallel.residual import fit_residual
from prenet.parallel.scaling import dle_scaling_pairs, predict_scaling
from prenet.paths import data_dir
from prenet.steptime.efficiency import EfficiencyModel


def train_parallel(cfg: DictConfig) -> dict:
    """Fit; write ``paths.models_parallel``, ``paths.parallel_scaling`` and ``metrics/train_parallel.json``."""
    t0 = time.monotonic()
    base = Path(data_dir())
    rule = split_rule(cfg, key_column="key")
    coll = assign_frame(measured_collectives(base), rule)
    dev = coll.filter(pl.col("split") != "holdout")
    assert_no_holdout(dev, rule, where="train_parallel")
    collectives = fit(dev, source=f"fitted on {dev.height} measured collectives (DeepBench, XLA) outside the frozen holdout")
    pairs = dle_scaling_pairs(base).filter(pl.col("gpus").is_in(list(cfg.parallel.scaling.gpus)))
    if cfg.parallel.scaling.models is not None:
        pairs = pairs.filter(pl.col("model").is_in(list(cfg.parallel.scaling.models)))
    # the physics alone (no residual yet): the residual is what it leaves of the measured scaling
    # its traces (the models on meta, no timing) in cfg.parallel.workers processes (`dvc repro -s train_parallel` 27-35 -> 21 s here, 2026-12-07)
    workers = int(cfg.parallel.get("workers", 1))

    def mapper(fn, keys):
        return run_items(fn, keys, workers=workers, threads=int(cfg.threads), desc="train_parallel traces", progress=bool(cfg.progress), unit="trace")

    rows = predict_scaling(pairs, EfficiencyModel.load(cfg.paths.models_ops_gpu), ParallelModel(collectives, SyncResidual({})), mapper=mapper)
    write_artifact(rows, cfg, "parallel_scaling")
    model = ParallelModel(collectives, fit_residual(rows))
    model.save(cfg.paths.models_parallel)
    metrics = {
        "collectives": {"fitted_rows": dev.height, **{k: asdict(v) for k, v in collectives.links.items()}},
        "residual": asdict(model.residual),
        "scaling_rows": rows.height,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    record_metrics(cfg, "train_parallel", metrics)
    shares = ", ".join(f"{k} {100 * v:.1f} %" for k, v in sorted(model.residual.share_at_8.items()))
    print(
        f"train_parallel: collectives on {dev.height} measured rows; residual at 8 GPUs {shares} ({rows.height} DLE rows) -> {cfg.paths.models_parallel}"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(train_parallel)()
