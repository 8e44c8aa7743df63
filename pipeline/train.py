"""Stage ``train``: one regressor per layer type on the development rows (never the holdout)."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import torch
from omegaconf import DictConfig, OmegaConf

from pipeline.config import hydra_entry
from pipeline.split import split_rule
from prenet.data.io import read_table, write_json
from prenet.data.schemas import SplitLayerFeatures
from prenet.data.split import assert_no_holdout
from prenet.steptime import fit_step_time_model


def train(cfg: DictConfig) -> dict:
    """Fit ``cfg.predictor`` per op on the train rows (early stopping on val); save the models to
    ``paths.models`` and the validation metrics to ``metrics/train.json``."""
    dev = read_table(cfg.paths.dev, SplitLayerFeatures)
    assert_no_holdout(dev, split_rule(cfg), where=f"train ({cfg.paths.dev})")
    torch.set_num_threads(int(cfg.threads))
    params = OmegaConf.to_container(cfg.predictor, resolve=True)
    name = params.pop("name")
    params.update(seed=int(cfg.seed), n_jobs=int(cfg.threads))
    t0 = time.monotonic()
    model, val = fit_step_time_model(
        dev.filter(pl.col("split") == "train"), dev.filter(pl.col("split") == "val"),
        predictor=name, params=params, feature_set=cfg.train.feature_set, progress=bool(cfg.progress),
    )
    wall = round(time.monotonic() - t0, 1)
    model.save(cfg.paths.models, extra={"val_metrics": val, "threads": int(cfg.threads)})
    metrics = {"predictor": name, "feature_set": cfg.train.feature_set, "threads": int(cfg.threads), "train_wall_s": wall, "val": val}
    write_json(metrics, Path(cfg.paths.metrics) / "train.json")
    print(f"train: {name} ({cfg.train.feature_set}) in {wall} s; val MAPE " + ", ".join(f"{op} {m['mape_pct']:.1f}%" for op, m in val.items()))
    return metrics


if __name__ == "__main__":
    hydra_entry(train)()
