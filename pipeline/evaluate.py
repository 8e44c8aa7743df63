"""Stage ``evaluate``: errors of the trained models on the frozen holdout only."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig

from pipeline.config import hydra_entry
from pipeline.split import split_rule
from prenet.data.io import read_table, write_json, write_table
from prenet.data.schemas import HoldoutPredictions, SplitLayerFeatures
from prenet.data.split import assign
from prenet.errors import PrenetError
from prenet.steptime import StepTimeModel, error_metrics


def _grouped(df: pl.DataFrame, by: list[str]) -> dict[str, dict]:
    out = {}
    for key, g in df.group_by(by, maintain_order=True):
        out["/".join(map(str, key))] = error_metrics(g.get_column("measured_ms").to_numpy(), g.get_column("predicted_ms").to_numpy())
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


def evaluate(cfg: DictConfig) -> dict:
    """Predict every holdout row; write ``metrics/evaluate.json`` (overall, per op, per source, per
    hardware, with the noise floor) and ``plots/holdout_predictions.csv``."""
    hold = read_table(cfg.paths.holdout, SplitLayerFeatures)
    rule = split_rule(cfg)
    stray = [k for k in hold.get_column(rule.key_column).unique().to_list() if assign(str(k), rule) != "holdout"]
    if stray:
        raise PrenetError(f"evaluate: {cfg.paths.holdout} holds {len(stray)} non-holdout key(s); rerun the split stage")
    model = StepTimeModel.load(cfg.paths.models)
    pred = hold.select("sample_id", "source", "hardware_id", "op", "direction", pl.col("time_ms").alias("measured_ms")).with_columns(
        pl.Series("predicted_ms", model.predict_ms(hold))
    )
    write_table(pred, Path(cfg.paths.plots) / "holdout_predictions.csv", HoldoutPredictions)
    metrics = {
        "predictor": model.predictor,
        "feature_set": model.feature_set,
        "overall": error_metrics(pred.get_column("measured_ms").to_numpy(), pred.get_column("predicted_ms").to_numpy()),
        "by_op": _grouped(pred, ["op"]),
        "by_source": _grouped(pred, ["source"]),
        "by_op_source": _grouped(pred, ["op", "source"]),
        "by_hardware": _grouped(pred, ["hardware_id"]),
        "noise_floor": noise_floor(hold),
    }
    write_json(metrics, Path(cfg.paths.metrics) / "evaluate.json")
    o = metrics["overall"]
    print(f"evaluate: holdout n={o['n']} MAPE {o['mape_pct']:.1f}% RMSE {o['rmse_ms']:.3f} ms; noise floor {metrics['noise_floor']}")
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate)()
