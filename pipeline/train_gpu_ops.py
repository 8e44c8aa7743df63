"""Stage ``train_gpu_ops``: the GPU part of the op-level efficiency models (``prenet/steptime/efficiency.py``), fitted on
the vendored GPU timings as ops (NeuSight's op set, the measured FP16/BF16/TF32 kernel tables) and never their frozen
holdout, with the host's cost per issued op. Nothing here reads the local machine: the part refits to the same bytes
(two fresh clones on this host, 2026-12-07), and the stages downstream of it alone are not re-run when the CPU is
benchmarked again."""

from __future__ import annotations

import time
from contextlib import nullcontext

import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.op_tables import fit_part, part_summary, split_ops
from pipeline.pool import in_background
from pipeline.record import record_metrics
from prenet.data.external_kernels import load_kernel_ops
from prenet.data.external_ops import load_gpu_ops
from prenet.steptime.reference_evaluation import fit_host, host_calibration_rows, ryujaehun_traces


def train_gpu_ops(cfg: DictConfig) -> dict:
    """Write ``paths.gpu_op_timings`` (vendored timings as ops), ``paths.models_ops_gpu`` and ``metrics/train_gpu_ops.json``."""
    t0 = time.monotonic()
    host_on = bool(cfg.ops.efficiency.get("host", True))  # the host's cost per issued op on a GPU (prenet.steptime.host)
    # its calibration steps are traced on meta in a second process while this one featurizes the vendored GPU ops and
    # fits (neither times anything)
    cal = host_calibration_rows() if host_on else None
    with in_background(ryujaehun_traces, cal, threads=int(cfg.threads)) if cal is not None else nullcontext() as traced:
        gpu = load_gpu_ops(int(cfg.ops.external.max_rows_per_gpu)).with_columns(pl.lit("fp32").alias("precision"))
        if cfg.ops.external.get("kernel_tables", True):  # measured FP16/BF16/TF32 kernels (DeepBench, XLA's H100 table)
            gpu = pl.concat([gpu, load_kernel_ops()], how="diagonal_relaxed")
        write_artifact(gpu.with_columns(pl.lit(0, dtype=pl.Int64).alias("threads")), cfg, "gpu_op_timings")
        ops = split_ops(cfg, "gpu_op_timings")
        model = fit_part(cfg, ops, None, where="train_gpu_ops")
        host = {}
        if traced is not None:
            h, mape, n = fit_host(model, cal, traces=traced.result())
            model.host_ms["gpu"] = h
            host = {"host_us_per_op": round(1e3 * h, 1), "host_fit_mape_pct": round(mape, 1), "host_fit_steps": n}
    model.save(cfg.paths.models_ops_gpu)
    metrics = {
        **part_summary(model, ops),
        **host,
        "gpus": len(model.measured_devices),
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
    }
    record_metrics(cfg, "train_gpu_ops", metrics)
    print(
        f"train_gpu_ops: {len(model.boosters)} GPU efficiency models ({metrics['dev_ops']} ops of {metrics['gpus']} GPUs) -> {cfg.paths.models_ops_gpu}"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(train_gpu_ops)()
