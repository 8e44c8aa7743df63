"""Stage ``evaluate_ops``: the op-level step-time model, measured — per-op errors on the frozen holdout (the local CPU's
and, from ``evaluate_gpu_ops``, the vendored GPU timings') beside the pure roofline; whole zoo training steps on the
local CPU in FP32 and BF16 autocast beside the roofline and the noise floor; the predicted peak memory of the zoo steps
against the measured; the share of each zoo step's predicted time that came from fallbacks (analogy, roofline) on the
CPU and on a catalog GPU; the intervals of ``prenet plan``. The GPU checks (leave-one-GPU-out, the whole-model checks
on unseen GPUs) are ``evaluate_gpu_ops``'s, carried into this record as they are (:data:`CARRIED`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import DictConfig

from pipeline.artifacts import artifact, read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.evaluate_gpu_ops import CARRIED
from pipeline.op_tables import specs_for, split_ops
from pipeline.record import read_record, record_metrics
from prenet import zoo
from prenet.hardware.catalog import get
from prenet.hardware.local import recorded_spec
from prenet.measurement.probe import MIN_SAMPLES, at_reference_speed, probe_samples, speed_ratio
from prenet.memory.evaluation import memory_summary, zoo_memory
from prenet.planner.intervals import RatioSet, StepTimeErrors, interval_ratios, write_errors
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import ape, errors_by, predict_rows
from prenet.steptime.zoo_evaluation import fallback_table, trace_seconds, whole_model_predictions, whole_model_summary


def evaluate_ops(cfg: DictConfig) -> dict:
    """Write ``metrics/evaluate_ops.json`` and ``plots/op_holdout.csv``, ``plots/op_zoo.csv``, ``plots/memory_zoo.csv``."""
    t0 = time.monotonic()
    model = EfficiencyModel.load(cfg.paths.models_ops)
    cpu = recorded_spec(cfg.paths.hardware_record)
    ops = split_ops(cfg, "op_timings")
    hold = ops.filter(pl.col("split") == "holdout")
    gpu_rec = read_record(cfg.paths.plots, "evaluate_gpu_ops")
    pred = pl.concat(
        [
            predict_rows(model, hold, specs_for(hold, cpu)).with_columns(pl.lit("cpu").alias("device")),
            read_artifact(cfg, "plots/op_holdout_gpu.csv"),
        ],
        how="diagonal_relaxed",
    ).sort("hardware_id", maintain_order=True)  # device by device, as the op model's device kinds are keyed
    write_artifact(
        pred.select("device", "hardware_id", "precision", "family", "op", "measured_ms", "predicted_ms", "roofline_ms", "estimate"),
        cfg,
        "plots/op_holdout.csv",
    )
    e_all = ape(pred["predicted_ms"].to_numpy(), pred["measured_ms"].to_numpy())
    metrics: dict = {
        "holdout": {
            "rows": pred.height,
            "mape_pct": float(e_all.mean()),
            "median_ape_pct": float(np.median(e_all)),
            "roofline_mape_pct": float(ape(pred["roofline_ms"].to_numpy(), pred["measured_ms"].to_numpy()).mean()),
            "by_device_precision": errors_by(pred, ["device", "precision"]),
            "by_family": errors_by(pred, ["device", "family"]),
            "by_family_unit": errors_by(pred.filter(pl.col("device") == "gpu"), ["family", "unit"]),
        },
        **{key: gpu_rec[key] for key in CARRIED if key in gpu_rec},
    }
    fp32 = read_artifact(cfg, "model_timings")
    bf16 = read_artifact(cfg, "model_timings_bf16") if artifact(cfg, "model_timings_bf16").is_file() else fp32.head(0)
    # the zoo steps were timed minutes away from the ops: each table on the ops' host speed (the op model's), their
    # fastest probes compared through the same number of samples (prenet/measurement/probe.py)
    tables = {"fp32": fp32, "bf16": bf16}
    ratios = {p: speed_ratio(ops, t) for p, t in tables.items()}
    metrics["host_speed"] = {
        **{f"zoo_{p}_factor": None if r is None else r[0] for p, r in ratios.items()},
        **{f"zoo_{p}_probe_samples": len(probe_samples(t)) for p, t in tables.items()},
        "op_benchmark_probe_samples": len(probe_samples(ops)),
        "note": "whole steps rescaled to the op benchmark's host speed: x its fastest probe / theirs, each the expected "
        f"fastest of the same number of probe samples (prenet/measurement/probe.py); a table of fewer than {MIN_SAMPLES} "
        "samples (factor null) is compared as timed",
    }
    fp32, bf16 = (at_reference_speed(t.with_columns(pl.col("measured_ms").alias("timed_ms")), ops) for t in tables.values())
    zoo_kw = {"sizes": cfg.models.get("sizes"), "overhead_path": cfg.paths.step_overhead, "threads": int(cfg.threads)}
    w = pl.concat(
        [whole_model_predictions(model, fp32, "fp32", cpu, **zoo_kw), whole_model_predictions(model, bf16, "bf16", cpu, **zoo_kw)],
        how="vertical_relaxed",
    )
    write_artifact(w, cfg, "plots/op_zoo.csv")
    metrics["whole_model"] = {p: whole_model_summary(w.filter(pl.col("precision") == p)) for p in ("fp32", "bf16")}
    mem = zoo_memory(fp32, cfg.models.get("sizes"))  # the planner's memory fit, measured (prenet/memory/evaluation.py)
    write_artifact(mem, cfg, "plots/memory_zoo.csv")
    metrics["memory"] = memory_summary(mem)
    if cfg.ops.evaluate.get("fallback_table", True):
        names = list(cfg.ops.evaluate.get("fallback_models") or zoo.ZOO)
        metrics["fallback"] = fallback_table(model, cpu, get(cfg.ops.evaluate.fallback_gpu), names, cfg.models.get("sizes"))
    if cfg.ops.evaluate.get("trace_1p3b", True):
        metrics["trace_seconds"] = trace_seconds()
    cov = float(cfg.evaluate.get("interval_coverage", 0.8))
    f32 = w.filter(pl.col("precision") == "fp32")
    local = RatioSet.measure(interval_ratios(f32["measured_ms"].to_numpy(), f32["predicted_ms"].to_numpy()), cov)
    deciles = gpu_rec.get("unseen_gpu_ratio_deciles")
    gpu = RatioSet.measure(deciles, cov, with_loo=False) if deciles else None
    errors = StepTimeErrors(cov, local, gpu, metrics["memory"].get("ratio_max"))
    write_errors(errors, Path(cfg.paths.intervals) / "step_time_ops.json")
    metrics["intervals"] = errors.summary()
    metrics["wall_s"] = round(time.monotonic() - t0, 1)
    metrics["threads"] = int(cfg.threads)
    record_metrics(cfg, "evaluate_ops", metrics)
    u = metrics.get("unseen_gpu", {})
    print(
        f"evaluate_ops: holdout op MAPE {metrics['holdout']['mape_pct']:.1f}% (roofline {metrics['holdout']['roofline_mape_pct']:.1f}%); "
        f"zoo CPU fp32 {metrics['whole_model']['fp32'].get('mape_pct', float('nan')):.1f}%, bf16 {metrics['whole_model']['bf16'].get('mape_pct', float('nan')):.1f}%; "
        f"unseen GPU mean {u.get('mean_mape_pct', float('nan')):.1f}%"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate_ops)()
