"""Stage ``report``: one self-contained HTML page and PNG figures from the metrics of the same run."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from pipeline.config import hydra_entry
from prenet.data.io import read_table, write_text
from prenet.data.schemas import HoldoutPredictions
from prenet.report import figures
from prenet.report.html import image, page, table

METRIC_COLS = ["n", "mape_pct", "median_ape_pct", "rmse_ms", "within_20pct"]


def report(cfg: DictConfig) -> dict:
    """Render ``paths.report``/index.html and its figures from ``metrics/*.json`` and the holdout predictions."""
    mdir, out = Path(cfg.paths.metrics), Path(cfg.paths.report)
    ev = json.loads((mdir / "evaluate.json").read_text())
    tr = json.loads((mdir / "train.json").read_text())
    sp = json.loads((mdir / "split.json").read_text())
    bm = json.loads((mdir / "benchmark.json").read_text())
    pred = read_table(Path(cfg.paths.plots) / "holdout_predictions.csv", HoldoutPredictions)
    scatter = figures.scatter_predicted_vs_measured(pred, out / "holdout_scatter.png", f"holdout: {ev['predictor']} ({ev['feature_set']})")
    bars = figures.bar_errors(ev["by_op_source"], ev["noise_floor"], out / "holdout_mape.png", "holdout MAPE by op and source")
    nf = ", ".join(f"{k.replace('_median_spread_pct', '')}: {v:.2f} %" for k, v in ev["noise_floor"].items())
    sections = [
        ("Run", table({"benchmark": bm}, ["hardware_id", "threads", "measured", "planned", "noise_floor_median_spread_pct", "wall_s"])
         + table({"split": sp}, ["train", "val", "holdout", "holdout_share"])
         + f"<p class=note>Predictor <b>{ev['predictor']}</b>, feature set <b>{ev['feature_set']}</b>, trained in {tr['train_wall_s']} s with {tr['threads']} thread(s).</p>"),
        ("Holdout errors (frozen 20 %)", f"<p class=note>Measurement noise floor (median run-to-run spread): {nf}. Errors below it are not meaningful.</p>"
         + table({"overall": ev["overall"]}, METRIC_COLS) + table(ev["by_op"], METRIC_COLS, "op")
         + table(ev["by_op_source"], METRIC_COLS, "op / source") + table(ev["by_hardware"], METRIC_COLS, "hardware")),
        ("Predicted vs measured", image(scatter, "predicted vs measured on the holdout") + image(bars, "holdout MAPE by op and source, noise floor dashed")),
        ("Validation (model selection)", table(tr["val"], METRIC_COLS, "op")),
    ]
    path = write_text(page(cfg.report.title, sections), out / "index.html")
    print(f"report: {path.resolve()}")
    return {"html": str(path)}



if __name__ == "__main__":
    hydra_entry(report)()
