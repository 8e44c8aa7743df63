"""Stage ``evaluate_ops``: the op-level step-time model, measured — per-op errors on the frozen holdout (CPU and the
vendored GPU timings) beside the pure roofline; leave-one-GPU-out per family and GPU; whole zoo training steps on the
local CPU in FP32 and BF16 autocast beside the roofline and the noise floor; the predicted peak memory of the zoo
steps against the measured; the share of each zoo step's
predicted time that came from fallbacks (analogy, roofline) on the CPU and on a catalog GPU; the intervals of ``prenet plan``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import artifact, read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.train_ops import all_ops, specs_for
from prenet import zoo
from prenet.hardware.catalog import get
from prenet.hardware.local import recorded_spec
from prenet.measurement.probe import at_reference_speed, reference_probe_ms
from prenet.memory.evaluation import memory_summary, zoo_memory
from prenet.planner.intervals import RatioSet, StepTimeErrors, interval_ratios, write_errors
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import ape, errors_by, leave_one_gpu_out, neusight_unseen_ops, predict_rows, unseen_ops_summary
from prenet.steptime.reference_evaluation import (
    dle_summary,
    dle_whole_model,
    hf_parity,
    hf_parity_summary,
    neusight_summary,
    neusight_whole_model,
    ryujaehun_summary,
    ryujaehun_whole_model,
)
from prenet.steptime.zoo_evaluation import fallback_table, mean_ci, trace_seconds, whole_model_predictions, whole_model_summary


def skipped_check(cfg: DictConfig, name: str, switch: str) -> dict[str, object]:
    """A check the config turned off: its declared output is written empty (DVC requires every out) and the
    metrics say it did not run and how to turn it on."""
    write_artifact(pl.DataFrame(), cfg, name)
    print(f"evaluate_ops: {switch}=false, so {name} is empty (set {switch}=true to run it)")
    return {"ran": False, "enable_with": f"{switch}=true"}


#: whole-model checks on GPUs never fitted on: pytorch-gpu-benchmark's torchvision CNN steps, DeepLearningExamples'
#: published throughput (AMP/TF32/FP32), NeuSight's measured transformer steps (H100, L4, A100 80GB), the HF parity of
#: one op's two answers; and, op by op, NeuSight's test set on GPUs whose FP32 GEMM and row-wise ops were never fitted
#: (L4, H100, A100 80GB). key: (output, check, summary); the longest first (``run_check`` spreads them over workers)
CHECKS: dict[str, tuple[str, Callable[[EfficiencyModel], pl.DataFrame], Callable[[pl.DataFrame], dict]]] = {
    "torchvision_whole_model": ("plots/op_torchvision.csv", ryujaehun_whole_model, ryujaehun_summary),
    "dle_whole_model": ("plots/op_dle.csv", dle_whole_model, dle_summary),
    "neusight_whole_model": ("plots/op_neusight_e2e.csv", neusight_whole_model, neusight_summary),
    "hf_parity": ("plots/op_hf_parity.csv", hf_parity, hf_parity_summary),
    "neusight_unseen_ops": ("plots/op_neusight_unseen.csv", neusight_unseen_ops, unseen_ops_summary),
}


def run_check(item: tuple[str, EfficiencyModel]) -> pl.DataFrame:
    """The rows of one of :data:`CHECKS` (picklable, for :func:`pipeline.pool.run_items`'s worker processes): the
    checks trace their models on meta and take no timing, so they run side by side."""
    key, model = item
    return CHECKS[key][1](model)


def evaluate_ops(cfg: DictConfig) -> dict:
    """Write ``metrics/evaluate_ops.json`` and ``plots/op_holdout.csv``, ``plots/op_unseen_gpu.csv``, ``plots/op_zoo.csv``."""
    t0 = time.monotonic()
    model = EfficiencyModel.load(cfg.paths.models_ops)
    cpu = recorded_spec(cfg.paths.hardware_record)
    ops = all_ops(cfg)
    hold = ops.filter(pl.col("split") == "holdout")
    pred = predict_rows(model, hold, specs_for(hold, cpu))
    kind = pl.when(pl.col("hardware_id") == cpu.hardware_id).then(pl.lit("cpu")).otherwise(pl.lit("gpu")).alias("device")
    pred = pred.with_columns(kind)
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
    }
    logo = None
    if cfg.ops.evaluate.unseen_gpu:
        gpu_dev = ops.filter((pl.col("hardware_id") != cpu.hardware_id) & (pl.col("split") != "holdout"))
        logo = leave_one_gpu_out(
            gpu_dev,
            params=OmegaConf.to_container(cfg.ops.efficiency.params, resolve=True),
            threads=int(cfg.threads),
            workers=int(cfg.ops.evaluate.get("workers", 1)),
        )
        write_artifact(logo.drop("ratio_deciles"), cfg, "plots/op_unseen_gpu.csv")
        per_gpu = logo.group_by("hardware_id").agg(((pl.col("mape") * pl.col("rows")).sum() / pl.col("rows").sum()).alias("mape")).sort("mape")
        per_fam = (
            logo.group_by("family", "unit").agg(pl.col("mape").mean(), pl.col("roofline_mape").mean(), pl.col("rows").sum()).sort("family", "unit")
        )
        worst = per_gpu.row(-1, named=True)
        metrics["unseen_gpu"] = {
            "folds": per_gpu.height,
            "mean_mape_pct": float(per_gpu["mape"].mean()),
            "mean_mape_ci95": mean_ci(per_gpu["mape"].to_numpy()),
            "roofline_mean_mape_pct": float(logo["roofline_mape"].mean()),
            "per_gpu": {r["hardware_id"]: round(r["mape"], 1) for r in per_gpu.iter_rows(named=True)},
            # per family and arithmetic unit (fp32 beside the measured TF32/FP16/BF16 kernels): mean over the held-out GPUs
            "per_family": {
                f"{r['family']}/{r['unit']}": {"mape_pct": round(r["mape"], 1), "roofline_mape_pct": round(r["roofline_mape"], 1), "rows": r["rows"]}
                for r in per_fam.iter_rows(named=True)
            },
            "hardest": {"hardware_id": worst["hardware_id"], "mape_pct": round(worst["mape"], 1)},
        }
    else:
        metrics["unseen_gpu"] = skipped_check(cfg, "plots/op_unseen_gpu.csv", "ops.evaluate.unseen_gpu")
    fp32 = read_artifact(cfg, "model_timings")
    bf16 = read_artifact(cfg, "model_timings_bf16") if artifact(cfg, "model_timings_bf16").is_file() else fp32.head(0)
    # the zoo steps were timed minutes away from the ops: each table on the ops' median host speed (the op model's)
    ref = reference_probe_ms(ops)
    metrics["host_speed"] = {
        "op_benchmark_probe_ms": ref,
        "zoo_fp32_probe_ms": reference_probe_ms(fp32),
        "zoo_bf16_probe_ms": reference_probe_ms(bf16),
        "note": "whole steps rescaled to the op benchmark's host speed by the ratio of median probes (prenet/measurement/probe.py)"
        if ref is not None
        else "no host-speed probe in these tables: steps compared as timed",
    }
    fp32, bf16 = (at_reference_speed(t.with_columns(pl.col("measured_ms").alias("timed_ms")), ref) for t in (fp32, bf16))
    zoo_kw = {"sizes": cfg.models.get("sizes"), "overhead_path": cfg.paths.step_overhead, "threads": int(cfg.threads)}
    w = pl.concat(
        [whole_model_predictions(model, fp32, "fp32", cpu, **zoo_kw), whole_model_predictions(model, bf16, "bf16", cpu, **zoo_kw)],
        how="vertical_relaxed",
    )
    write_artifact(w, cfg, "plots/op_zoo.csv")
    metrics["whole_model"] = {p: whole_model_summary(w.filter(pl.col("precision") == p)) for p in ("fp32", "bf16")}
    enabled = [key for key in CHECKS if cfg.ops.evaluate.get(key, True)]
    workers = int(cfg.ops.evaluate.get("workers", 1))
    results = run_items(
        run_check,
        [(key, model) for key in enabled],
        workers=workers,
        threads=int(cfg.threads),
        desc="evaluate_ops checks",
        progress=bool(cfg.progress),
    )
    for key, rows in zip(enabled, results):
        name, _, summary = CHECKS[key]
        write_artifact(rows, cfg, name)
        metrics[key] = summary(rows)
    for key in CHECKS:
        if key not in enabled:
            metrics[key] = skipped_check(cfg, CHECKS[key][0], f"ops.evaluate.{key}")
    metrics["host_us_per_op"] = round(1e3 * model.host_ms.get("gpu", 0.0), 1)  # fitted by train_ops (prenet.steptime.host)
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
    gpu = None
    if logo is not None:
        gpu = RatioSet.measure([v for row in logo["ratio_deciles"].to_list() for v in row], cov, with_loo=False)
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
