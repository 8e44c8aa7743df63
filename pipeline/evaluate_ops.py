"""Stage ``evaluate_ops``: the op-level step-time model, measured — per-op errors on the frozen holdout (CPU and the
vendored GPU timings) beside the pure roofline; leave-one-GPU-out per family and GPU; whole zoo training steps on the
local CPU in FP32 and BF16 autocast beside the PreNeT recipe and the noise floor; the share of each zoo step's
predicted time that came from fallbacks (analogy, roofline) on the CPU and on a catalog GPU; the intervals of ``prenet plan``."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import artifact, read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.evaluate import interval_ratios
from pipeline.record import record_metrics
from pipeline.train_ops import all_ops, specs_for
from prenet import zoo
from prenet.hardware.catalog import get
from prenet.hardware.local import recorded_spec
from prenet.ops import trace_step
from prenet.planner.intervals import RatioSet, StepTimeErrors, write_errors
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import ape, leave_one_gpu_out, predict_rows
from prenet.steptime.step import default_overhead_ms, device_type, predict_trace


def _errors(df: pl.DataFrame, by: list[str]) -> list[dict]:
    e = df.with_columns(
        pl.Series("ape", ape(df["predicted_ms"].to_numpy(), df["measured_ms"].to_numpy())),
        pl.Series("roof_ape", ape(df["roofline_ms"].to_numpy(), df["measured_ms"].to_numpy())),
    )
    out = e.group_by(by).agg(
        pl.len().alias("rows"),
        pl.col("ape").mean().alias("mape_pct"),
        pl.col("ape").median().alias("median_ape_pct"),
        pl.col("roof_ape").mean().alias("roofline_mape_pct"),
        (pl.col("spread_rel").median() * 100).alias("noise_floor_pct"),
    )
    return out.sort(by).to_dicts()


def whole_models(cfg: DictConfig, model: EfficiencyModel, timings: pl.DataFrame, precision: str, hw) -> pl.DataFrame:
    """Each measured zoo step predicted through the one step-time path (trace on meta → ops → sum + null step)."""
    rows = []
    for r in timings.iter_rows(named=True):
        with torch.device("meta"):
            module, batch = zoo.build(r["model"], int(r["batch_size"]), cfg.models.get("sizes"))
        trace = trace_step(module, batch, optimizer=r["optimizer"], precision=precision, device_type="cpu")
        pred, ops = predict_trace(trace, hw, model, overhead_ms=default_overhead_ms(hw, r["optimizer"], cfg.paths.step_overhead))
        fallback = float(ops.filter(pl.col("estimate") != "model")["predicted_ms"].sum()) / max(float(ops["predicted_ms"].sum()), 1e-12)
        rows.append(
            {
                "model": r["model"],
                "batch_size": r["batch_size"],
                "precision": precision,
                "measured_ms": r["measured_ms"],
                "predicted_ms": pred.step_seconds * 1e3,
                "roofline_ms": float(ops["roofline_ms"].sum()) + pred.overhead_ms,
                "spread_rel": r["spread_rel"],
                "fallback_share": fallback,
                "ops": ops.height,
            }
        )
    return pl.DataFrame(rows)


def mean_ci(values: np.ndarray, *, seed: int = 0, n_boot: int = 2000) -> list[float]:
    """95 % bootstrap interval of the mean of ``values`` (resampling the items: zoo steps, held-out GPUs)."""
    v = np.asarray(values, float)
    if v.size < 2:
        return [float(v.mean()), float(v.mean())] if v.size else []
    idx = np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))
    m = v[idx].mean(axis=1)
    return [round(float(np.quantile(m, 0.025)), 2), round(float(np.quantile(m, 0.975)), 2)]


def _summary(w: pl.DataFrame) -> dict:
    if w.height == 0:
        return {}
    e = ape(w["predicted_ms"].to_numpy(), w["measured_ms"].to_numpy())
    return {
        "mape_pct": float(e.mean()),
        "mape_ci95": mean_ci(e),
        "median_ape_pct": float(np.median(e)),
        "n": w.height,
        "roofline_mape_pct": float(ape(w["roofline_ms"].to_numpy(), w["measured_ms"].to_numpy()).mean()),
        "noise_floor_pct": float(100 * w["spread_rel"].median()),
        "per_model": {f"{m} b{b}": round(float(x), 1) for m, b, x in zip(w["model"], w["batch_size"], e)},
    }


def fallback_table(cfg: DictConfig, model: EfficiencyModel, cpu) -> list[dict]:
    """Share of each zoo model's predicted step (batch 16) estimated without a model of the op's own family, on the local
    CPU (fp32) and the catalog GPU ``ops.evaluate.fallback_gpu`` (fp32 and bf16); ``ops.evaluate.fallback_models``
    (null: the whole zoo)."""
    out = []
    gpu = get(cfg.ops.evaluate.fallback_gpu)
    for name in cfg.ops.evaluate.get("fallback_models") or list(zoo.ZOO):
        with torch.device("meta"):
            module, batch = zoo.build(name, 16, cfg.models.get("sizes"))
        for hw, prec in ((cpu, "fp32"), (gpu, "fp32"), (gpu, "bf16")):
            pred, ops = predict_trace(trace_step(module, batch, precision=prec, device_type=device_type(hw)), hw, model)
            out.append(
                {
                    "model": name,
                    "hardware": hw.hardware_id,
                    "precision": prec,
                    "step_ms": round(pred.step_seconds * 1e3, 3),
                    **{f"{k}_share": round(v, 3) for k, v in pred.estimate_share.items()},
                }
            )
    return out


def trace_seconds() -> dict:
    """Wall time (s) of tracing one training step of a 1.3 B-parameter GPT (GPT-3 XL sizes, batch 8 × 2048 tokens, Adam,
    bf16 for a GPU) on the meta device: no weight memory, no compute."""
    t0 = time.perf_counter()
    with torch.device("meta"):
        module, batch = zoo.gpt_sdpa(batch_size=8, vocab=50257, d=2048, layers=24, heads=16, seq_len=2048)
    trace = trace_step(module, batch, optimizer="adam", precision="bf16", device_type="cuda")
    return {"gpt_1p3b_s": round(time.perf_counter() - t0, 2), "params": trace.params, "ops": len(trace.records)}


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
            "by_device_precision": _errors(pred, ["device", "precision"]),
            "by_family": _errors(pred, ["device", "family"]),
        },
    }
    logo = None
    if cfg.ops.evaluate.unseen_gpu:
        gpu_dev = ops.filter((pl.col("hardware_id") != cpu.hardware_id) & (pl.col("split") != "holdout"))
        logo = leave_one_gpu_out(gpu_dev, params=OmegaConf.to_container(cfg.ops.efficiency.params, resolve=True), threads=int(cfg.threads))
        write_artifact(logo.drop("ratio_deciles"), cfg, "plots/op_unseen_gpu.csv")
        per_gpu = logo.group_by("hardware_id").agg(((pl.col("mape") * pl.col("rows")).sum() / pl.col("rows").sum()).alias("mape")).sort("mape")
        per_fam = logo.group_by("family").agg(pl.col("mape").mean(), pl.col("roofline_mape").mean()).sort("family")
        worst = per_gpu.row(-1, named=True)
        metrics["unseen_gpu"] = {
            "folds": per_gpu.height,
            "mean_mape_pct": float(per_gpu["mape"].mean()),
            "mean_mape_ci95": mean_ci(per_gpu["mape"].to_numpy()),
            "roofline_mean_mape_pct": float(logo["roofline_mape"].mean()),
            "per_gpu": {r["hardware_id"]: round(r["mape"], 1) for r in per_gpu.iter_rows(named=True)},
            "per_family": {
                r["family"]: {"mape_pct": round(r["mape"], 1), "roofline_mape_pct": round(r["roofline_mape"], 1)}
                for r in per_fam.iter_rows(named=True)
            },
            "hardest": {"hardware_id": worst["hardware_id"], "mape_pct": round(worst["mape"], 1)},
        }
    fp32 = read_artifact(cfg, "model_timings")
    bf16 = read_artifact(cfg, "model_timings_bf16") if artifact(cfg, "model_timings_bf16").is_file() else fp32.head(0)
    w = pl.concat([whole_models(cfg, model, fp32, "fp32", cpu), whole_models(cfg, model, bf16, "bf16", cpu)], how="vertical_relaxed")
    zoo_old = Path(cfg.paths.plots) / "zoo_predictions.csv"
    if zoo_old.is_file():
        old = pl.read_csv(zoo_old)
        w = w.join(
            old.select("model", "batch_size", *[c for c in ("prenet_recipe_ms", "prenet_ms") if c in old.columns]),
            on=["model", "batch_size"],
            how="left",
        )
    write_artifact(w, cfg, "plots/op_zoo.csv")
    metrics["whole_model"] = {p: _summary(w.filter(pl.col("precision") == p)) for p in ("fp32", "bf16")}
    if "prenet_recipe_ms" in w.columns:
        f = w.filter(pl.col("precision") == "fp32")
        metrics["whole_model"]["prenet_recipe_fp32_mape_pct"] = float(ape(f["prenet_recipe_ms"].to_numpy(), f["measured_ms"].to_numpy()).mean())
    metrics["fallback"] = fallback_table(cfg, model, cpu)
    if cfg.ops.evaluate.get("trace_1p3b", True):
        metrics["trace_seconds"] = trace_seconds()
    cov = float(cfg.evaluate.get("interval_coverage", 0.8))
    f32 = w.filter(pl.col("precision") == "fp32")
    local = RatioSet.measure(interval_ratios(f32["measured_ms"].to_numpy(), f32["predicted_ms"].to_numpy()), cov)
    gpu = None
    if logo is not None:
        gpu = RatioSet.measure([v for row in logo["ratio_deciles"].to_list() for v in row], cov, with_loo=False)
    errors = StepTimeErrors(cov, local, gpu)
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
