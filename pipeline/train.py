"""Stage ``train``: per-layer-type regressors on the development rows (never the holdout).

Three models come out of one run, so the report can compare them on the same data:

* ``paths.models`` — the configured predictor (``predictor`` group) on the configured feature set;
* ``paths.models_baseline`` — the same predictor on the baseline features only (Justus et al.'s recipe:
  no computational features);
* ``paths.models_selected`` — PreNeT's recipe: per op, the best of ``train.selection.predictors`` ×
  ``train.selection.feature_sets`` on the validation split.
"""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import compose, hydra_entry
from pipeline.pool import in_background
from pipeline.record import record_metrics
from pipeline.split import split_rule
from prenet.data.split_rule import assert_no_holdout


def fit_baseline(item: tuple) -> dict:
    """Justus et al.'s recipe (the predictor on the baseline features), fitted and saved to ``path``; its validation
    metrics (picklable, for :func:`pipeline.pool.in_background`: it fits beside the configured model, timing nothing)."""
    from prenet.recipe.model import fit_step_time_model

    tr, va, name, params, min_rows, path = item
    base, bval = fit_step_time_model(
        tr, va, predictor=name, params=params, feature_set="baseline", min_rows=min_rows, progress=False, name="justus_recipe"
    )
    base.save(path, extra={"val_metrics": bval})
    return bval


def predictor_params(cfg_predictor, seed: int, threads: int) -> tuple[str, dict]:
    params = OmegaConf.to_container(cfg_predictor, resolve=True)
    name = params.pop("name")
    params.update(seed=seed, n_jobs=threads)
    return name, params


def train(cfg: DictConfig) -> dict:
    """Fit the configured, the baseline-feature and the selected models; save them and ``metrics/train.json``."""
    # the fitting's imports (torch, XGBoost: 3.5 s) only here: `python -m pipeline.train` with a bad override, --help or
    # --cfg answers without them
    import torch

    from prenet.recipe.model import fit_step_time_model, select_step_time_model

    dev = read_artifact(cfg, "dev")
    assert_no_holdout(dev, split_rule(cfg), where=f"train ({cfg.paths.dev})")
    torch.set_num_threads(int(cfg.threads))
    tr, va = dev.filter(pl.col("split") == "train"), dev.filter(pl.col("split") == "val")
    seed, threads, min_rows = int(cfg.seed), int(cfg.threads), int(cfg.train.min_rows)
    name, params = predictor_params(cfg.predictor, seed, threads)
    metrics: dict = {
        "predictor": name,
        "feature_set": cfg.train.feature_set,
        "target": cfg.train.target,
        "extrapolate": bool(cfg.train.extrapolate),
        "compute_floor": bool(cfg.train.compute_floor),
        "threads": threads,
    }

    t0 = time.monotonic()
    # the baseline recipe fits in a second process meanwhile (both cores; `dvc repro -s train` 34 -> 29 s here, 2026-12-07), the same fits either way
    baseline = (tr, va, name, params, min_rows, str(cfg.paths.models_baseline)) if cfg.train.baseline else None
    with in_background(fit_baseline, baseline, threads=threads) if baseline else nullcontext() as pending:
        model, val = fit_step_time_model(
            tr,
            va,
            predictor=name,
            params=params,
            feature_set=cfg.train.feature_set,
            min_rows=min_rows,
            progress=bool(cfg.progress),
            name="prenet",
            target=cfg.train.target,
            extrapolate=bool(cfg.train.extrapolate),
            compute_floor=bool(cfg.train.compute_floor),
        )
        metrics["train_wall_s"] = round(time.monotonic() - t0, 1)
        if baseline:  # a wall time shared with the baseline's fit on the other core (timing-insensitive)
            metrics["train_wall_note"] = "measured while the baseline recipe fitted in a second process"
        model.save(cfg.paths.models, extra={"val_metrics": val, "threads": threads})
        metrics["val"] = val
        if pending is not None:
            metrics["val_baseline"] = pending.result()

    sel = cfg.train.selection
    if sel.enabled:
        # each candidate's settings: its option of the predictor group (conf/predictor/, a dvc dep of this stage),
        # composed by Hydra so an option built on another (xgboost_small on xgboost) gets the settings it says
        candidates = dict(predictor_params(compose([f"predictor={p}"]).predictor, seed, threads) for p in sel.predictors)
        t1 = time.monotonic()
        chosen, grid = select_step_time_model(
            tr,
            va,
            candidates=candidates,
            feature_sets=list(sel.feature_sets),
            min_rows=min_rows,
            progress=bool(cfg.progress),
            name="prenet_recipe",
            fallback=model.ops["_pooled"],
            workers=int(sel.get("workers", 1)),
        )
        chosen.save(cfg.paths.models_selected)
        write_artifact(pl.DataFrame(grid), cfg, "plots/selection_grid.csv")
        metrics["selection_wall_s"] = round(time.monotonic() - t1, 1)
        metrics["selected"] = {op: f"{m.predictor}/{m.feature_set}" for op, m in chosen.ops.items()}
        # Table 4 shape: median over ops of the validation MAPE of each predictor × feature set
        g = pl.DataFrame(grid).filter(pl.col("op") != "_pooled")
        metrics["selection_val_mape_median"] = {
            f"{r['predictor']}/{r['feature_set']}": r["mape_pct"]
            for r in g.group_by("predictor", "feature_set").agg(pl.col("mape_pct").median()).sort("predictor", "feature_set").iter_rows(named=True)
        }
    else:  # declared outputs of the stage, saying why they are empty (experiment=full runs the selection)
        out = Path(cfg.paths.models_selected)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        (out / "NOT_TRAINED.txt").write_text("train.selection.enabled is false; experiment=full trains PreNeT's per-op selection\n")
        empty = {"op": pl.String, "predictor": pl.String, "feature_set": pl.String, "mape_pct": pl.Float64, "selected": pl.Boolean}
        write_artifact(pl.DataFrame(schema=empty), cfg, "plots/selection_grid.csv")
    record_metrics(cfg, "train", metrics)
    print(
        f"train: {name} ({cfg.train.feature_set}) in {metrics['train_wall_s']} s; val MAPE "
        + ", ".join(f"{op} {m.get('mape_pct', float('nan')):.1f}%" for op, m in val.items())
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(train)()
