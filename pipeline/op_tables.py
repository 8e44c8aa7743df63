"""The op tables of the op-level stages: the local CPU's op benchmark (``paths.op_timings``) and the vendored GPU
timings as ops (``paths.gpu_op_timings``), each with the frozen split keyed by configuration; and the fit of one part of
the op-level model (:data:`prenet.steptime.efficiency.PARTS`) on a table's development ops, never its holdout."""

from __future__ import annotations

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact
from prenet.data.schemas import OpTimings
from prenet.data.split_rule import SplitRule, assert_no_holdout, assign_frame
from prenet.hardware.catalog import get
from prenet.hardware.spec import HardwareSpec
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import by_device


def op_split_rule(cfg: DictConfig) -> SplitRule:
    """The frozen split of ``conf/split`` keyed by configuration (an op benchmark step, or a vendored shape on every GPU)."""
    return SplitRule(
        key_column="config_id",
        salt=str(cfg.split.salt),
        holdout_fraction=float(cfg.split.holdout_fraction),
        val_fraction=float(cfg.split.val_fraction),
    )


def specs_for(ops: pl.DataFrame, local: HardwareSpec | None) -> dict[str, HardwareSpec]:
    """The spec of every ``hardware_id`` in ``ops``: the local CPU's recorded detection, catalog GPUs by name."""
    return {h: (local if local is not None and h == local.hardware_id else get(h)) for h in ops.get_column("hardware_id").unique().to_list()}


def split_ops(cfg: DictConfig, name: str) -> pl.DataFrame:
    """Artifact ``name`` (``op_timings`` or ``gpu_op_timings``) in the op model's columns, with the frozen ``split``."""
    ops = read_artifact(cfg, name)
    cols = [*OpTimings.to_schema().columns, "spread_rel", "kernel_only"]
    return assign_frame(ops.select([c for c in cols if c in ops.columns]), op_split_rule(cfg))


def fit_part(cfg: DictConfig, ops: pl.DataFrame, local: HardwareSpec | None, *, where: str) -> EfficiencyModel:
    """The efficiency models (``ops.efficiency``) of the devices in ``ops``, fitted on its development rows only
    (``where`` names the stage in the error a holdout row raises)."""
    dev = ops.filter(pl.col("split") != "holdout")
    assert_no_holdout(dev, op_split_rule(cfg), where=where)
    return EfficiencyModel.fit(
        by_device(dev, specs_for(dev, local)),
        params=OmegaConf.to_container(cfg.ops.efficiency.params, resolve=True),
        min_rows=int(cfg.ops.efficiency.min_rows),
        min_rows_family={str(k): int(v) for k, v in (cfg.ops.efficiency.get("min_rows_family") or {}).items()},
        threads=int(cfg.threads),
    )


def part_summary(model: EfficiencyModel, ops: pl.DataFrame) -> dict:
    """What a fitted part records: training rows per (device kind, family), the median efficiency per device kind, and
    the development / frozen-holdout ops of its table."""
    dev = int((ops.get_column("split") != "holdout").sum())
    return {"rows": model.rows, "median_efficiency": model.median_efficiency, "dev_ops": dev, "holdout_ops": ops.height - dev}
