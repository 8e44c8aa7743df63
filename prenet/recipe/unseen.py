"""Unseen hardware: leave-one-GPU-out on the external timings.

For each dataset (Justus 2018, NeuSight 2025) and each of its GPUs: train on the other GPUs of that dataset,
predict every row of the held-out GPU from its spec sheet only (its hardware features and the roofline), and
report the MAPE per layer type. Recipes compared in the same run:

* ``roofline_target`` — all PreNeT features, target normalised by the roofline (ln(time / roofline)), i.e. the
  attained fraction of the roofline is learned instead of the time (``train.target: roofline_ratio``);
* ``prenet_recipe`` — all PreNeT features, target ln(time) (PreNeT as published);
* ``justus_recipe`` — baseline features only (layer parameters + hardware), target ln(time);
* ``roofline`` — no learning: max(FLOPs / peak, bytes / bandwidth).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from prenet.recipe.features import design_matrix
from prenet.recipe.metrics import error_metrics
from prenet.recipe.model import _fit_one

RECIPES: dict[str, tuple[str, str]] = {  # name → (feature set, target)
    "roofline_target": ("ct", "roofline_ratio"),
    "prenet_recipe": ("ct", "time"),
    "justus_recipe": ("baseline", "time"),
}


def _deciles(ratio: np.ndarray) -> list[float]:
    """10th, 20th, …, 90th percentile of measured / predicted (the error distribution of one fold)."""
    return [float(v) for v in np.quantile(ratio, np.linspace(0.1, 0.9, 9))]


def _fold(job: tuple) -> list[dict[str, Any]]:
    """One held-out GPU of one (source, op): every recipe's errors (empty when the fold is too small)."""
    data, source, op, gpu, predictor, params, min_rows = job
    test, rest = data.filter(pl.col("hardware_id") == gpu), data.filter(pl.col("hardware_id") != gpu)
    if rest.height < min_rows or test.height == 0 or rest["hardware_id"].n_unique() < 2:
        return []
    measured = test["time_ms"].to_numpy()
    base = {"source": source, "op": op, "held_out": gpu}
    out = []
    for name, (fs, target) in RECIPES.items():
        entry, _ = _fit_one(rest, rest.head(0), op, predictor, params, fs, progress=False, target=target)
        X, _ = design_matrix(test, op, fs)
        predicted = entry.from_target(test, entry.regressor.predict(X))
        out.append({**base, "recipe": name, **error_metrics(measured, predicted), "ratio_deciles": _deciles(measured / predicted)})
    roof = test["roofline_ms"].to_numpy()
    out.append({**base, "recipe": "roofline", **error_metrics(measured, roof), "ratio_deciles": _deciles(measured / roof)})
    return out


def leave_one_gpu_out(
    features: pl.DataFrame, *, predictor: str, params: dict[str, Any], min_rows: int = 50, progress: bool = True, workers: int = 1
) -> pl.DataFrame:
    """One row per (source, op, held-out GPU, recipe): n, MAPE %, median APE %, within ±20 %.

    ``features`` are LayerFeatures rows of the external sources (each source is evaluated on its own GPUs only:
    the datasets differ in framework and timing method)."""
    out: list[dict[str, Any]] = []
    groups = features.select("source", "op").unique().sort("source", "op").iter_rows()
    tasks = [
        (s, o, g) for s, o in groups for g in sorted(features.filter((pl.col("source") == s) & (pl.col("op") == o))["hardware_id"].unique().to_list())
    ]
    jobs = [(features.filter((pl.col("source") == s) & (pl.col("op") == o)), s, o, g, predictor, params, min_rows) for s, o, g in tasks]
    bar = tqdm(total=len(jobs), desc="leave-one-GPU-out", unit="fold", disable=not progress)
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        from prenet.recipe.model import _one_thread

        # folds are independent: spawned processes (fork can deadlock once OpenMP runs here); results in fold order
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_one_thread) as ex:
            for rows in ex.map(_fold, jobs):
                out += rows
                bar.update()
    else:
        for job in jobs:
            out += _fold(job)
            bar.update()
    bar.close()
    return pl.DataFrame(out)


def summarize(logo: pl.DataFrame) -> dict[str, Any]:
    """Mean over folds of the MAPE per recipe, overall and per (source, op)."""
    if logo.height == 0:
        return {}
    overall = {r: float(g["mape_pct"].mean()) for (r,), g in logo.group_by(["recipe"])}
    per = {}
    for (s, o, r), g in logo.group_by(["source", "op", "recipe"]):
        per.setdefault(f"{s}/{o}", {})[r] = float(g["mape_pct"].mean())
    return {
        "mean_mape_pct": dict(sorted(overall.items())),
        "by_source_op": dict(sorted(per.items())),
        "folds": int(logo.select("source", "op", "held_out").unique().height),
        "median_fold_mape_pct": {r: float(np.median(g["mape_pct"].to_numpy())) for (r,), g in logo.group_by(["recipe"])},
    }
