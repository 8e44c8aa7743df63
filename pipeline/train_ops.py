"""Stage ``train_ops``: the op-level efficiency models (``prenet/steptime/efficiency.py``) on the development ops — the
local CPU's op benchmark and the vendored GPU timings as ops — never the frozen holdout (keyed by configuration)."""

from __future__ import annotations

import time
from contextlib import nullcontext

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import in_background
from pipeline.record import record_metrics
from prenet.data.external_kernels import load_kernel_ops
from prenet.data.external_ops import load_gpu_ops
from prenet.data.schemas import OpTimings
from prenet.data.split_rule import SplitRule, assert_no_holdout, assign_frame
from prenet.hardware.catalog import get
from prenet.hardware.local import recorded_spec
from prenet.hardware.spec import HardwareSpec
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import by_device
from prenet.steptime.reference_evaluation import fit_host, host_calibration_rows, ryujaehun_traces


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


def all_ops(cfg: DictConfig) -> pl.DataFrame:
    """CPU op benchmark + vendored GPU ops, with the frozen ``split`` column."""
    cpu = read_artifact(cfg, "op_timings")
    gpu = read_artifact(cfg, "gpu_op_timings")
    cols = [c for c in OpTimings.to_schema().columns] + ["spread_rel", "kernel_only"]
    both = pl.concat([cpu.select([c for c in cols if c in cpu.columns]), gpu.select([c for c in cols if c in gpu.columns])], how="diagonal_relaxed")
    return assign_frame(both, op_split_rule(cfg))


def train_ops(cfg: DictConfig) -> dict:
    """Write ``paths.gpu_op_timings`` (vendored timings as ops), ``paths.models_ops`` and ``metrics/train_ops.json``."""
    t0 = time.monotonic()
    host_on = bool(cfg.ops.efficiency.get("host", True))  # the host's cost per issued op on a GPU (prenet.steptime.host)
    # its calibration steps are traced on meta in a second process while this one featurizes the vendored GPU ops and
    # fits (neither times anything; ~10 s of the stage's ~23 s here)
    cal = host_calibration_rows() if host_on else None
    with in_background(ryujaehun_traces, cal, threads=int(cfg.threads)) if cal is not None else nullcontext() as traced:
        model, gpu, ops, dev = _fit(cfg)
        host = {}
        if traced is not None:
            h, mape, n = fit_host(model, cal, traces=traced.result())
            model.host_ms["gpu"] = h
            host = {"host_us_per_op": round(1e3 * h, 1), "host_fit_mape_pct": round(mape, 1), "host_fit_steps": n}
    model.save(cfg.paths.models_ops)
    metrics = {
        "rows": model.rows,
        "median_efficiency": model.median_efficiency,
        **host,
        "dev_ops": dev.height,
        "holdout_ops": ops.height - dev.height,
        "gpu_ops": gpu.height,
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
    }
    record_metrics(cfg, "train_ops", metrics)
    print(f"train_ops: {len(model.boosters)} efficiency models -> {cfg.paths.models_ops}")
    return metrics


def _fit(cfg: DictConfig) -> tuple[EfficiencyModel, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Write ``paths.gpu_op_timings``; fit the efficiency models on the development ops. Returns (model, the GPU ops,
    all ops, the development ops)."""
    gpu = load_gpu_ops(int(cfg.ops.external.max_rows_per_gpu)).with_columns(pl.lit("fp32").alias("precision"))
    if cfg.ops.external.get("kernel_tables", True):  # measured FP16/BF16/TF32 kernels (DeepBench, XLA's H100 table)
        gpu = pl.concat([gpu, load_kernel_ops()], how="diagonal_relaxed")
    gpu = gpu.with_columns(pl.lit(0, dtype=pl.Int64).alias("threads"))
    write_artifact(gpu, cfg, "gpu_op_timings")
    rule = op_split_rule(cfg)
    ops = all_ops(cfg)
    dev = ops.filter(pl.col("split") != "holdout")
    assert_no_holdout(dev, rule, where="train_ops")
    specs = specs_for(dev, recorded_spec(cfg.paths.hardware_record))
    model = EfficiencyModel.fit(
        by_device(dev, specs),
        params=OmegaConf.to_container(cfg.ops.efficiency.params, resolve=True),
        min_rows=int(cfg.ops.efficiency.min_rows),
        min_rows_family={str(k): int(v) for k, v in (cfg.ops.efficiency.get("min_rows_family") or {}).items()},
        threads=int(cfg.threads),
    )
    return model, gpu, ops, dev


if __name__ == "__main__":
    hydra_entry(train_ops)()
