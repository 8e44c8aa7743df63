"""Stage ``train_outcome``: the early-success models (pooled XGBoost per epoch × feature set × target) on the
development runs only; thresholds and residual quantiles frozen into the manifest."""

from __future__ import annotations

import time

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.split import outcome_split_rule
from prenet.data.split_rule import assert_no_holdout
from prenet.outcome.models import save, train_all


def train_outcome(cfg: DictConfig) -> dict:
    """Fit on the development runs; write ``paths.outcome_models`` and ``metrics/train_outcome.json``."""
    o = cfg.outcome
    runs = read_artifact(cfg, "outcome_runs")
    dev = runs.filter(pl.col("split") != "holdout")
    assert_no_holdout(dev, outcome_split_rule(cfg), where="train_outcome")
    tel = read_artifact(cfg, "outcome_telemetry").join(dev.select("run_id"), on="run_id", how="semi")
    t0 = time.monotonic()
    models, manifest = train_all(
        dev,
        tel,
        epochs=list(o.epochs_at),
        params=OmegaConf.to_container(o.predictor, resolve=True),
        classes=int(o.relative_classes),
        failure_fraction=float(o.failure_fraction),
        interval=list(o.evaluate.interval),
        seed=int(cfg.seed),
        folds=int(o.evaluate.cv_folds),
        bands=int(o.evaluate.interval_bands),
        mapper=lambda fn, items: run_items(
            fn, items, workers=int(o.workers), threads=int(cfg.threads), desc="train_outcome", progress=bool(cfg.progress), unit="epoch"
        ),
    )
    save(models, manifest, cfg.paths.outcome_models)
    metrics = {
        "dev_runs": dev.height,
        "models": len(models),
        "domains": manifest["domains"],
        "thresholds": manifest["thresholds"],
        "workers": int(o.workers),
        "threads": int(cfg.threads),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    record_metrics(cfg, "train_outcome", metrics)
    print(
        f"train_outcome: {len(models)} models on {dev.height} development runs (pooled over {', '.join(manifest['domains'])}) -> {cfg.paths.outcome_models}"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(train_outcome)()
