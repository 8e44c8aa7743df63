"""Stage ``split``: the frozen 20% holdout, by hash of each sample's identity key."""

from __future__ import annotations

import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from prenet.data.split_rule import SplitRule, assign_frame


def split_rule(cfg: DictConfig, key_column: str | None = None) -> SplitRule:
    """The frozen rule of ``conf/split``; ``key_column`` overrides its key (``config_id`` for fine-tuning runs,
    ``run_id`` for the early-success corpus) — same salt and fractions for every table."""
    s = cfg.split
    return SplitRule(
        key_column=key_column or s.key_column, salt=s.salt, holdout_fraction=float(s.holdout_fraction), val_fraction=float(s.val_fraction)
    )


def convergence_split_rule(cfg: DictConfig) -> SplitRule:
    """The frozen rule keyed by ``group_id``: the seeds of one fine-tuning setting fall on the same side of the split."""
    return split_rule(cfg, key_column="group_id")


def outcome_split_rule(cfg: DictConfig) -> SplitRule:
    """The frozen rule keyed by ``run_id``, for the early-success corpus."""
    return split_rule(cfg, key_column="run_id")


def split(cfg: DictConfig) -> dict:
    """Assign train / val / holdout; write the development table (train + val) and the holdout table
    separately, and ``metrics/split.json``."""
    df = assign_frame(read_artifact(cfg, "validated"), split_rule(cfg))
    dev = df.filter(pl.col("split") != "holdout")
    hold = df.filter(pl.col("split") == "holdout")
    write_artifact(dev, cfg, "dev")
    write_artifact(hold, cfg, "holdout")
    counts = {s: int((df.get_column("split") == s).sum()) for s in ("train", "val", "holdout")}
    metrics = {
        **counts,
        "holdout_share": counts["holdout"] / max(df.height, 1),
        "holdout_share_of_keys": hold.get_column(split_rule(cfg).key_column).n_unique()
        / max(df.get_column(split_rule(cfg).key_column).n_unique(), 1),
    }
    record_metrics(cfg, "split", metrics)
    print(f"split: {counts} -> {cfg.paths.dev}, {cfg.paths.holdout}")
    return metrics


if __name__ == "__main__":
    hydra_entry(split)()
