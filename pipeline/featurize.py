"""Stage ``featurize``: local timings + vendored external timings → PreNeT features."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from prenet.data.external import load_external
from prenet.errors import PrenetError
from prenet.hardware import catalog
from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS
from prenet.recipe.features import IDENTITY_COLUMNS
from prenet.recipe.features import featurize as featurize_rows


def featurize(cfg: DictConfig) -> dict:
    """Join the local raw timings with the external datasets and compute every feature; writes
    ``paths.features`` (validated by the next stage)."""
    raw = read_artifact(cfg, "raw_timings")
    if raw.height == 0:  # a benchmark that measured nothing must not leave the models trained on the GPU rows alone, unsaid
        raise PrenetError(
            f"{cfg.paths.raw_timings} has no rows: the local benchmark measured nothing; rerun it (`dvc repro -f benchmark`) "
            "or raise benchmark.max_seconds"
        )
    local = raw.with_columns(pl.lit("local").alias("source"), pl.lit("none").alias("activation"))
    cols = [*IDENTITY_COLUMNS, *ALL_SHAPE_COLUMNS, "time_ms", "spread_rel"]
    ops = sorted(local.get_column("op").unique().to_list())
    ext = cfg.featurize.external
    sources = ext.sources if isinstance(ext.sources, str) else list(ext.sources)  # one name given as text is refused there
    external = load_external(sources, ops, ext.max_rows_per_gpu)
    frames = [local.select(cols)] + ([external.select(cols)] if external.height else [])
    rows = pl.concat(frames, how="vertical_relaxed")
    hardware: dict[str, HardwareSpec] = dict(catalog())
    rec = json.loads(Path(cfg.paths.hardware_record).read_text())
    hardware[rec["hardware_id"]] = HardwareSpec(**rec)
    feats = featurize_rows(rows, hardware)
    write_artifact(feats, cfg, "features")
    counts = feats.group_by("source", "op").len().sort("source", "op")
    print(f"featurize: {feats.height} rows -> {cfg.paths.features}\n{counts}")
    return {"rows": feats.height}


if __name__ == "__main__":
    hydra_entry(featurize)()
