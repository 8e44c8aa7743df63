"""Stage ``evaluate``: errors on the frozen holdout only, and whole-model step times against measurement.

Layer level: the configured model, the Justus recipe (baseline features) and the PreNeT recipe (per-op
selection) on every holdout row. Whole models: each measured zoo step (``benchmark_models``) predicted by the
three models from its layers alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import torch
from omegaconf import DictConfig

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from pipeline.split import split_rule
from prenet import zoo
from prenet.data.split_rule import assign
from prenet.errors import PrenetError
from prenet.hardware.spec import HardwareSpec
from prenet.planner.intervals import RatioSet, StepTimeErrors, interval_ratios, write_errors
from prenet.recipe.metrics import error_metrics
from prenet.recipe.model import StepTimeModel
from prenet.recipe.predict import predict_recipe_step
from prenet.recipe.unseen import leave_one_gpu_out, summarize


def _grouped(df: pl.DataFrame, by: list[str], measured: str = "measured_ms", predicted: str = "predicted_ms") -> dict[str, dict]:
    out = {}
    for key, g in df.group_by(by, maintain_order=True):
        out["/".join(map(str, key))] = error_metrics(g.get_column(measured).to_numpy(), g.get_column(predicted).to_numpy())
    return dict(sorted(out.items()))


def noise_floor(hold: pl.DataFrame) -> dict[str, float]:
    """Median run-to-run spread (%) of the holdout measurements per source: IQR/median of repeats for local
    rows, std/median for Justus; NeuSight publishes none."""
    out = {}
    for (src,), g in hold.group_by(["source"]):
        s = g.get_column("spread_rel").drop_nulls()
        if s.len():
            out[f"{src}_median_spread_pct"] = float(100 * s.median())
    return dict(sorted(out.items()))


def _load_models(cfg: DictConfig) -> dict[str, StepTimeModel]:
    models = {"prenet": StepTimeModel.load(cfg.paths.models)}
    if cfg.train.baseline:
        models["justus_recipe"] = StepTimeModel.load(cfg.paths.models_baseline)
    if cfg.train.selection.enabled:
        models["prenet_recipe"] = StepTimeModel.load(cfg.paths.models_selected)
    return models


def evaluate_whole_models(cfg: DictConfig, models: dict[str, StepTimeModel]) -> tuple[pl.DataFrame, dict]:
    """Predict every measured zoo step from its layers with each model; MAPE per zoo model and overall."""
    timings = read_artifact(cfg, "model_timings")
    hw = HardwareSpec(**json.loads(Path(cfg.paths.hardware_record).read_text()))
    overhead = json.loads(Path(cfg.paths.step_overhead).read_text())["null_step_ms"]
    rows = []
    for r in timings.iter_rows(named=True):
        with torch.device("meta"):
            module, batch = zoo.build(r["model"], r["batch_size"], cfg.models.get("sizes"))
        row = {k: r[k] for k in ("model", "batch_size", "optimizer", "measured_ms", "spread_rel")}
        for name, m in models.items():
            p = predict_recipe_step(
                module, batch, hardware=hw, model=m, optimizer=r["optimizer"], threads=r["threads"], overhead_ms=overhead.get(r["optimizer"], 0.0)
            )
            row[f"{name}_ms"] = p.step_seconds * 1e3
        rows.append(row)
    df = pl.DataFrame(rows)
    summary: dict = {}
    for name in models:
        summary[name] = {
            "overall": error_metrics(df["measured_ms"].to_numpy(), df[f"{name}_ms"].to_numpy()),
            "by_model": _grouped(df, ["model"], predicted=f"{name}_ms"),
        }
    summary["noise_floor_median_spread_pct"] = float(100 * df["spread_rel"].median())
    return df, summary


def intervals(whole: pl.DataFrame, logo: pl.DataFrame | None, coverage: float) -> StepTimeErrors:
    """The error distributions behind the planner's intervals (``prenet.planner``): measured / predicted step time of
    every whole zoo step on the local CPU (recipe ``prenet``), and, for GPUs, the deciles of measured / predicted
    per layer on each held-out GPU of the leave-one-GPU-out evaluation (recipe ``prenet_recipe``: the same
    features and target as ``prenet``), pooled over folds."""
    local = RatioSet.measure(interval_ratios(whole["measured_ms"].to_numpy(), whole["prenet_ms"].to_numpy()), coverage)
    gpu = None
    if logo is not None and "ratio_deciles" in logo.columns:
        r = [v for row in logo.filter(pl.col("recipe") == "prenet_recipe")["ratio_deciles"].to_list() for v in row]
        gpu = RatioSet.measure(r, coverage, with_loo=False) if r else None
    return StepTimeErrors(coverage, local, gpu)


def evaluate_unseen_hardware(cfg: DictConfig) -> tuple[pl.DataFrame, dict]:
    """Leave-one-GPU-out on the external rows of the development split (the holdout stays untouched), each GPU
    subsampled to ``evaluate.unseen_hardware.max_rows_per_gpu`` shapes by stable hash."""
    u = cfg.evaluate.unseen_hardware
    dev = read_artifact(cfg, "dev").filter(pl.col("source") != "local")
    dev = (
        dev.with_columns(pl.col("shape_id").hash(7).rank("dense").over("source", "op", "hardware_id").alias("_r"))
        .filter(pl.col("_r") <= int(u.max_rows_per_gpu))
        .drop("_r")
    )
    from omegaconf import OmegaConf

    params = {**OmegaConf.to_container(u.params, resolve=True), "seed": int(cfg.seed), "n_jobs": int(cfg.threads)}
    logo = leave_one_gpu_out(dev, predictor=u.predictor, params=params, progress=bool(cfg.progress), workers=int(u.get("workers", 1)))
    return logo, summarize(logo)


def evaluate(cfg: DictConfig) -> dict:
    """Write ``metrics/evaluate.json`` (holdout errors overall / per op / source / hardware for each model, the
    noise floor, whole-model errors) and the predictions behind them under ``paths.plots``."""
    hold = read_artifact(cfg, "holdout")
    rule = split_rule(cfg)
    stray = [k for k in hold.get_column(rule.key_column).unique().to_list() if assign(str(k), rule) != "holdout"]
    if stray:
        raise PrenetError(f"evaluate: {cfg.paths.holdout} holds {len(stray)} non-holdout key(s); rerun the split stage")
    models = _load_models(cfg)
    main = models["prenet"]
    pred = hold.select("sample_id", "source", "hardware_id", "op", "direction", pl.col("time_ms").alias("measured_ms")).with_columns(
        pl.Series("predicted_ms", main.predict_ms(hold))
    )
    write_artifact(pred, cfg, "plots/holdout_predictions.csv")
    metrics = {
        "predictor": main.predictor,
        "feature_set": main.feature_set,
        "overall": error_metrics(pred.get_column("measured_ms").to_numpy(), pred.get_column("predicted_ms").to_numpy()),
        "by_op": _grouped(pred, ["op"]),
        "by_source": _grouped(pred, ["source"]),
        "by_op_source": _grouped(pred, ["op", "source"]),
        "by_hardware": _grouped(pred, ["hardware_id"]),
        "noise_floor": noise_floor(hold),
        "recipes": {},
    }
    for name, m in models.items():
        p = pred if name == "prenet" else pred.with_columns(pl.Series("predicted_ms", m.predict_ms(hold)))
        metrics["recipes"][name] = {
            "overall": error_metrics(p["measured_ms"].to_numpy(), p["predicted_ms"].to_numpy()),
            "by_op": {k: v["mape_pct"] for k, v in _grouped(p, ["op"]).items()},
        }
    whole, metrics["whole_model"] = evaluate_whole_models(cfg, models)
    write_artifact(whole, cfg, "plots/zoo_predictions.csv")
    logo = None
    if cfg.evaluate.unseen_hardware.enabled:
        logo, metrics["unseen_hardware"] = evaluate_unseen_hardware(cfg)
        write_artifact(logo.drop("ratio_deciles", strict=False), cfg, "plots/unseen_hardware.csv")
    else:  # a declared output: empty, with the columns it has when on (experiment=full)
        cols = {"recipe": pl.String, "held_out": pl.String, "op": pl.String, "mape_pct": pl.Float64}
        write_artifact(pl.DataFrame(schema=cols), cfg, "plots/unseen_hardware.csv")
    errors = intervals(whole, logo, float(cfg.evaluate.get("interval_coverage", 0.8)))
    write_errors(errors, Path(cfg.paths.intervals) / "step_time.json")
    metrics["intervals"] = errors.summary()
    record_metrics(cfg, "evaluate", metrics)
    o = metrics["overall"]
    wm = ", ".join(f"{k} {v['overall']['mape_pct']:.1f}%" for k, v in metrics["whole_model"].items() if isinstance(v, dict) and "overall" in v)
    print(
        f"evaluate: holdout n={o['n']} MAPE {o['mape_pct']:.1f}% RMSE {o['rmse_ms']:.3f} ms; whole-model MAPE: {wm}; "
        f"noise floor {metrics['noise_floor']}"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate)()
