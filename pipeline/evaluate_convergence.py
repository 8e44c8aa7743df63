"""Stage ``evaluate_convergence``: predicted vs real steps to target on the frozen holdout of fine-tuning
configurations, the baselines, the linearization / approximation / subset gaps, the drift flag, cost ratios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.split import convergence_split_rule
from prenet.convergence.baselines import ProbeRegressor, curve_fit_item
from prenet.convergence.evaluation import auc, by_curve, curve_distance, dense, score, seed_noise_floor, steps_for, target_list, task_regime
from prenet.data.split_rule import assert_no_holdout
from prenet.planner.intervals import RatioSet, StepsErrors, drift_band, write_errors
from prenet.rendering import figures

PRED_SOURCES = ("default", "forecast", "forecast_ode", "corrected", "curve_fit", "probe_regressor")
GAP_SOURCES = ("linear_sgd", "dynamics_full")


def _tkey(kind: str, param: float) -> str:
    return {"relative_eps": f"relative_eps={param:g}", "loss": f"loss<={param:g}*L0", "accuracy": f"accuracy>={param:g}"}[kind]


def _median(s: pl.Series) -> float | None:
    """The median of ``s``, None when it has no value (an evaluative variant that was not run)."""
    m = s.median()
    return None if m is None else float(m)


def evaluate_convergence(cfg: DictConfig) -> dict:
    """Write ``paths.convergence_targets``, ``metrics/convergence.json`` and the convergence figures."""
    ev = OmegaConf.to_container(cfg.convergence.evaluate, resolve=True)
    runs = read_artifact(cfg, "finetune_runs")
    fruns = read_artifact(cfg, "forecast_runs")
    curves = by_curve(pl.concat([read_artifact(cfg, "finetune_curves"), read_artifact(cfg, "forecast_curves")]))
    regime = {name: task_regime(t) for name, t in cfg.convergence.tasks.items() if t is not None}  # no Task built: no torch
    runs = runs.join(fruns, on="config_id", how="left")
    rows: list[dict] = []
    dense_cache: dict[tuple[str, str], tuple[np.ndarray, np.ndarray] | None] = {}
    reals = {r["config_id"]: dense(curves, r["config_id"], "real", int(r["steps"])) for r in runs.iter_rows(named=True)}
    # the parametric baseline's least-squares fits (SciPy, ~0.2 s a configuration) in convergence.workers processes
    fit_items = [
        (real[0], int(r["steps"]), float(ev["curve_fit_fraction"])) for r in runs.iter_rows(named=True) if (real := reals[r["config_id"]]) is not None
    ]
    fitted = iter(
        run_items(
            curve_fit_item,
            fit_items,
            workers=int(cfg.convergence.workers),
            threads=int(cfg.threads),
            desc="curve-fit baseline",
            progress=bool(cfg.progress),
        )
    )
    for r in runs.iter_rows(named=True):
        cid, T = r["config_id"], int(r["steps"])
        real = reals[cid]
        if real is None:
            continue
        srcs = {s: dense(curves, cid, s, T) for s in ("default", "forecast", "forecast_ode", "corrected", *GAP_SOURCES)}
        srcs["curve_fit"] = (next(fitted), None)
        dense_cache.update({(cid, s): v for s, v in srcs.items()})
        dense_cache[(cid, "real")] = real
        for kind, param, value in target_list(ev["targets"], float(real[0][0])):
            rs = steps_for(kind, value, *real)
            for s, v in srcs.items():
                if v is None or (kind == "accuracy" and v[1] is None):
                    continue
                rows.append(
                    {
                        "config_id": cid,
                        "task": r["task"],
                        "regime": regime.get(r["task"], "unknown"),
                        "split": r["split"],
                        "target_kind": kind,
                        "target_param": param,
                        "source": s,
                        "real_steps": rs,
                        "pred_steps": steps_for(kind, value, *v),
                    }
                )
    assert next(fitted, None) is None  # every fit used once, in order (and the pool closed)
    tgt = pl.DataFrame(rows, schema_overrides={"real_steps": pl.Int64, "pred_steps": pl.Int64})
    # the probe regressor: trained on development configurations only, per target
    rule = convergence_split_rule(cfg)
    dev, hold = runs.filter(pl.col("split") != "holdout"), runs.filter(pl.col("split") == "holdout")
    assert_no_holdout(dev, rule, where="evaluate_convergence (probe regressor training)")
    base = tgt.filter(pl.col("source") == "forecast").select("config_id", "task", "regime", "split", "target_kind", "target_param", "real_steps")
    probe_rows = []
    for (kind, param), g in base.group_by(["target_kind", "target_param"], maintain_order=True):
        train = dev.join(g.filter(pl.col("real_steps").is_not_null()), on="config_id", how="inner")
        if train.height < 5 or hold.height == 0:
            continue
        reg = ProbeRegressor(seed=int(cfg.seed)).fit(train, train["real_steps"].to_numpy())
        pred = reg.predict(hold)
        gh = g.join(hold.select("config_id"), on="config_id", how="inner")
        pmap = dict(zip(hold["config_id"].to_list(), pred.tolist()))
        probe_rows += [
            {**row, "source": "probe_regressor", "pred_steps": int(min(max(pmap[row["config_id"]], 0), 10**9))} for row in gh.iter_rows(named=True)
        ]
    if probe_rows:
        tgt = pl.concat([tgt, pl.DataFrame(probe_rows, schema=tgt.schema).select(tgt.columns)])
    write_artifact(tgt, cfg, "convergence_targets")

    within = float(ev["within"])
    h = tgt.filter(pl.col("split") == "holdout")
    headline: dict = {}
    for (kind, param, src), g in h.group_by(["target_kind", "target_param", "source"], maintain_order=True):
        headline.setdefault(_tkey(kind, param), {})[src] = score(g, within)
    # measurement noise floor: the same configuration with other seeds (all configurations: nothing is fitted here)
    real = (
        tgt.filter(pl.col("source") == "forecast")
        .select("config_id", "target_kind", "target_param", "real_steps")
        .join(runs.select("config_id", "task", "lr", "momentum", "batch_size", "loss", "seed"), on="config_id")
    )
    noise = {_tkey(k, p): v for (k, p), v in seed_noise_floor(real, ["task", "lr", "momentum", "batch_size", "loss"]).items()}
    # the planner's intervals on steps (prenet plan): real / predicted steps of every holdout configuration where both reached the target
    cov = float(cfg.evaluate.get("interval_coverage", 0.8))
    steps_errors = StepsErrors(cov)

    def ratios_of(g: pl.DataFrame) -> list[float]:
        both = g.filter(pl.col("real_steps").is_not_null() & pl.col("pred_steps").is_not_null())
        return [float(r) / max(float(p), 1.0) for r, p in zip(both["real_steps"].to_list(), both["pred_steps"].to_list())]

    for (kind, param, src), g in h.filter(pl.col("source").is_in(["default", "forecast", "corrected"])).group_by(
        ["target_kind", "target_param", "source"], maintain_order=True
    ):
        steps_errors.targets.setdefault(_tkey(kind, param), {})[src] = RatioSet.measure(ratios_of(g), cov)
    # the default answer's errors by how far its kernel drifted (all configurations: the forecast fits nothing on them)
    banded = tgt.filter(pl.col("source") == "default").join(fruns.select("config_id", "drift"), on="config_id", how="left")
    banded = banded.with_columns(pl.col("drift").map_elements(drift_band, return_dtype=pl.String).alias("band"))
    for (band,), g in banded.filter(pl.col("band").is_not_null()).group_by(["band"], maintain_order=True):
        steps_errors.by_drift[str(band)] = RatioSet.measure(ratios_of(g), cov)
    write_errors(steps_errors, Path(cfg.paths.intervals) / "steps.json")
    # gaps on the holdout: real → exact linearized SGD → ODE/SDE on all N → ODE/SDE on the subset (the forecast)
    gaps: dict = {}
    chain = [
        ("linearization (real vs linearized SGD)", "real", "linear_sgd"),
        ("approximation (linearized SGD vs ODE/SDE, all N)", "linear_sgd", "dynamics_full"),
        ("subset (ODE/SDE all N vs on the subset)", "dynamics_full", "forecast"),
    ]
    for name, a, b in chain:
        per = {}
        for (kind, param), g in h.group_by(["target_kind", "target_param"], maintain_order=True):
            ga = g.filter(pl.col("source") == b).select("config_id", pl.col("pred_steps").alias("pred_steps"))
            gr = (
                g.filter(pl.col("source") == a).select("config_id", pl.col("pred_steps").alias("real_steps"))
                if a != "real"
                else g.filter(pl.col("source") == b).select("config_id", "real_steps")
            )
            per[_tkey(kind, param)] = score(gr.join(ga, on="config_id"), within)
        dists = [
            curve_distance(dense_cache[(c, a)][0], dense_cache[(c, b)][0])
            for c in hold["config_id"].to_list()
            if dense_cache.get((c, a)) is not None and dense_cache.get((c, b)) is not None
        ]
        dists = [d for d in dists if d is not None]
        gaps[name] = {"steps": per, "median_curve_distance": float(np.median(dists)) if dists else None, "n_curves": len(dists)}
    # cost: real fine-tuning wall time (SGD steps only) / prediction wall time
    hc = hold.with_columns(
        (pl.col("train_seconds") / pl.col("plain_seconds")).alias("ratio_plain"),
        (pl.col("train_seconds") / pl.col("ode_seconds")).alias("ratio_ode"),
        (pl.col("train_seconds") / (pl.col("plain_seconds") + pl.col("probe_seconds"))).alias("ratio_corrected"),
    )
    cost = (
        {
            "median_ratio_forecast": float(hc["ratio_plain"].median()),
            "median_ratio_corrected": float(hc["ratio_corrected"].median()),
            "median_ratio_forecast_ode": _median(hc["ratio_ode"]),
            "max_ratio_forecast": float(hc["ratio_plain"].max()),
            "median_train_seconds": float(hc["train_seconds"].median()),
            "median_forecast_seconds": float(hc["plain_seconds"].median()),
            "median_probe_seconds": float(hc["probe_seconds"].median()),
            "curve_fit_ratio": 1.0 / float(ev["curve_fit_fraction"]),
        }
        if hold.height
        else {}
    )
    # cost per task over every configuration (cost is not fitted, so the development configurations count too)
    allc = runs.with_columns(
        (pl.col("train_seconds") / pl.col("plain_seconds")).alias("ratio_plain"),
        (pl.col("train_seconds") / pl.col("ode_seconds")).alias("ratio_ode"),
        (pl.col("train_seconds") / (pl.col("plain_seconds") + pl.col("probe_seconds"))).alias("ratio_corrected"),
    )
    cost_by_task = {
        t: {
            "configs": g.height,
            "n_train": int(g["n_train"].max()),
            "median_steps": float(g["steps"].median()),
            "median_train_seconds": float(g["train_seconds"].median()),
            "median_forecast_seconds": float(g["plain_seconds"].median()),
            "median_ratio_forecast": float(g["ratio_plain"].median()),
            "median_ratio_forecast_ode": _median(g["ratio_ode"]),
            "median_ratio_corrected": float(g["ratio_corrected"].median()),
        }
        for (t,), g in allc.group_by(["task"], maintain_order=True)
    }
    # where the linearization breaks: plain vs corrected error per task / lr / momentum (all configurations: the forecast
    # has no fitted parameter, so the development configurations are fair to describe it), and the drift flag
    primary = _tkey("relative_eps", float(ev["targets"]["relative_eps"][0]))
    eps0 = float(ev["targets"]["relative_eps"][0])
    prim = tgt.filter((pl.col("target_kind") == "relative_eps") & (pl.col("target_param") == eps0))
    ape = (
        prim.filter(pl.col("source").is_in(["forecast", "corrected"]) & pl.col("real_steps").is_not_null() & pl.col("pred_steps").is_not_null())
        .with_columns(((pl.col("pred_steps") - pl.col("real_steps")).abs() / pl.max_horizontal(pl.col("real_steps"), pl.lit(1))).alias("ape"))
        .join(runs.select("config_id", "lr", "momentum", "batch_size", "loss", "drift", "reliable"), on="config_id")
    )
    breaks = {}
    for (task, lr, m, src), g in ape.group_by(["task", "lr", "momentum", "source"], maintain_order=True):
        breaks.setdefault(f"{task} lr={lr:g} m={m:g}", {})[f"{src}_median_ape_pct"] = float(100 * g["ape"].median())
        breaks[f"{task} lr={lr:g} m={m:g}"]["median_drift"] = float(g["drift"].median())
        breaks[f"{task} lr={lr:g} m={m:g}"]["regime"] = regime.get(task, "unknown")
    by_regime = {}
    for (reg, src), g in ape.group_by(["regime", "source"], maintain_order=True):
        by_regime.setdefault(reg, {})[f"{src}_median_ape_pct"] = float(100 * g["ape"].median())
        by_regime[reg]["n"] = g.height
    # momentum: plain / default forecast error per momentum and target (all configurations, as above)
    every = (
        tgt.filter(pl.col("source").is_in(["forecast", "default"]) & pl.col("real_steps").is_not_null() & pl.col("pred_steps").is_not_null())
        .with_columns(((pl.col("pred_steps") - pl.col("real_steps")).abs() / pl.max_horizontal(pl.col("real_steps"), pl.lit(1))).alias("ape"))
        .join(runs.select("config_id", "momentum"), on="config_id")
    )
    by_momentum: dict = {}
    for (m, kind, param, src), g in every.group_by(["momentum", "target_kind", "target_param", "source"], maintain_order=True):
        by_momentum.setdefault(f"m={m:g}", {}).setdefault(_tkey(kind, param), {})[f"{src}_median_ape_pct"] = float(100 * g["ape"].median())
    pf = ape.filter(pl.col("source") == "forecast")
    measured = pf.filter(pl.col("drift").is_not_null())  # a drift never measured is not a drift of 0
    drift_flag = {
        "threshold": float(cfg.convergence.forecast.drift_threshold),
        "auc_drift_for_error_over_20pct": auc(measured["drift"].to_numpy(), measured["ape"].to_numpy() > within) if measured.height else None,
        "drift_unmeasured": int(pf.height - measured.height),
        "flagged_share": float((~runs["reliable"]).mean()) if runs.height else None,
        "median_ape_pct_flagged": float(100 * pf.filter(~pl.col("reliable"))["ape"].median()) if pf.filter(~pl.col("reliable")).height else None,
        "median_ape_pct_unflagged": float(100 * pf.filter(pl.col("reliable"))["ape"].median()) if pf.filter(pl.col("reliable")).height else None,
    }
    metrics = {
        "holdout_configs": hold.height,
        "configs": runs.height,
        "primary_target": primary,
        "holdout": headline,
        "noise_floor": noise,
        "intervals": steps_errors.summary(),
        "gaps": gaps,
        "cost": cost,
        "cost_by_task": cost_by_task,
        "by_regime": by_regime,
        "by_task_lr": breaks,
        "by_momentum": by_momentum,
        "drift_flag": drift_flag,
    }
    record_metrics(cfg, "convergence", metrics)
    # figures: predicted vs real loss curves of holdout configurations, and predicted vs real steps
    plots = Path(cfg.paths.plots)
    sel = hold.sort("task", "loss", "lr", "momentum", "batch_size")["config_id"].to_list()[:12]
    titles = {
        r["config_id"]: f"{r['task']} {r['loss'][:3]} lr={r['lr']:g} m={r['momentum']:g} B={r['batch_size']}" for r in runs.iter_rows(named=True)
    }
    figures.loss_curves(
        {c: {s: dense_cache.get((c, s)) for s in ("real", "forecast", "corrected", "linear_sgd", "curve_fit")} for c in sel},
        titles,
        plots / "convergence_curves.png",
    )
    figures.steps_scatter(
        h.filter(pl.col("target_kind") == "relative_eps").filter(pl.col("target_param") == eps0),
        plots / "convergence_steps.png",
        f"holdout: steps to {primary}, predicted vs real",
    )
    hf = headline.get(primary, {}).get("forecast", {})
    print(
        f"evaluate_convergence: {hold.height} holdout configurations; {primary}: forecast median error {hf.get('median_ape_pct', float('nan')):.1f} %, "
        f"within ±{within:.0%} {hf.get('within_pct', float('nan')):.0f} %, cost ratio {cost.get('median_ratio_forecast', float('nan')):.1f}x"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate_convergence)()
