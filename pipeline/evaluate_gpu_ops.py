"""Stage ``evaluate_gpu_ops``: the GPU part of the op-level model (``train_gpu_ops``), measured on GPUs — its answer for
every frozen-holdout GPU op (``evaluate_ops`` pools them with the CPU's); leave-one-GPU-out per family and unit; the
whole-model checks on GPUs never fitted on (:data:`CHECKS`); the deciles of measured / predicted on held-out GPUs behind
``prenet plan``'s GPU intervals. It reads nothing of the local machine, so a checkout whose GPU part refits to the same
bytes skips it (its outputs are in git)."""

from __future__ import annotations

import time
from collections.abc import Callable

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.op_tables import specs_for, split_ops
from pipeline.pool import run_items
from pipeline.record import record_metrics
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import leave_one_gpu_out, neusight_unseen_ops, predict_rows, unseen_ops_summary
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
from prenet.steptime.zoo_evaluation import mean_ci

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

#: the keys of this stage's record that ``evaluate_ops`` carries into its own, as they are
CARRIED = ("unseen_gpu", *CHECKS, "host_us_per_op")


def skipped_check(cfg: DictConfig, name: str, switch: str) -> dict[str, object]:
    """A check the config turned off: its declared output is written empty (DVC requires every out) and the
    metrics say it did not run and how to turn it on."""
    write_artifact(pl.DataFrame(), cfg, name)
    print(f"evaluate_gpu_ops: {switch}=false, so {name} is empty (set {switch}=true to run it)")
    return {"ran": False, "enable_with": f"{switch}=true"}


def run_check(item: tuple[str, EfficiencyModel]) -> pl.DataFrame:
    """The rows of one of :data:`CHECKS` (picklable, for :func:`pipeline.pool.run_items`'s worker processes): the
    checks trace their models on meta and take no timing, so they run side by side."""
    key, model = item
    return CHECKS[key][1](model)


def evaluate_gpu_ops(cfg: DictConfig) -> dict:
    """Write ``metrics/evaluate_gpu_ops.json``, ``plots/op_holdout_gpu.csv``, ``plots/op_unseen_gpu.csv`` and the
    outputs of :data:`CHECKS`."""
    t0 = time.monotonic()
    model = EfficiencyModel.load(cfg.paths.models_ops_gpu)
    ops = split_ops(cfg, "gpu_op_timings")
    hold = ops.filter(pl.col("split") == "holdout")
    pred = predict_rows(model, hold, specs_for(hold, None)).with_columns(pl.lit("gpu").alias("device"))
    cols = ["device", "hardware_id", "precision", "family", "unit", "op", "measured_ms", "predicted_ms", "roofline_ms", "estimate"]
    write_artifact(pred.select(cols), cfg, "plots/op_holdout_gpu.csv")
    metrics: dict = {"holdout_ops": pred.height}
    if cfg.ops.evaluate.unseen_gpu:
        logo = leave_one_gpu_out(
            ops.filter(pl.col("split") != "holdout"),
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
        # measured / predicted per held-out (GPU, family, unit), its deciles: prenet plan's GPU interval (evaluate_ops)
        metrics["unseen_gpu_ratio_deciles"] = [round(float(v), 4) for row in logo["ratio_deciles"].to_list() for v in row]
    else:
        metrics["unseen_gpu"] = skipped_check(cfg, "plots/op_unseen_gpu.csv", "ops.evaluate.unseen_gpu")
    enabled = [key for key in CHECKS if cfg.ops.evaluate.get(key, True)]
    results = run_items(
        run_check,
        [(key, model) for key in enabled],
        workers=int(cfg.ops.evaluate.get("workers", 1)),
        threads=int(cfg.threads),
        desc="evaluate_gpu_ops checks",
        progress=bool(cfg.progress),
    )
    for key, rows in zip(enabled, results):
        name, _, summary = CHECKS[key]
        write_artifact(rows, cfg, name)
        metrics[key] = summary(rows)
    for key in CHECKS:
        if key not in enabled:
            metrics[key] = skipped_check(cfg, CHECKS[key][0], f"ops.evaluate.{key}")
    metrics["host_us_per_op"] = round(1e3 * model.host_ms.get("gpu", 0.0), 1)  # fitted by train_gpu_ops (prenet.steptime.host)
    metrics["wall_s"] = round(time.monotonic() - t0, 1)
    metrics["threads"] = int(cfg.threads)
    record_metrics(cfg, "evaluate_gpu_ops", metrics)
    u = metrics["unseen_gpu"]
    print(f"evaluate_gpu_ops: {pred.height} holdout GPU ops; unseen GPU mean {u.get('mean_mape_pct', float('nan')):.1f}%")
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate_gpu_ops)()
