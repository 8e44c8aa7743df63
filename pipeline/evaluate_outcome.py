"""Stage ``evaluate_outcome``: the early-success models on the frozen holdout — R², MAE, failure ROC AUC and
relative-class accuracy per epoch (and per domain) with bootstrap 95 % intervals beside the naive guess and the
loss/accuracy-only model, the feature-group ablation (paired bootstrap), leave-one-domain-out and
leave-one-optimizer-out, interval coverage and the failure-probability reliability curve, feature importances,
figures."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact, write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.split import outcome_split_rule
from prenet.data.io import read_table
from prenet.data.schemas import OutcomeRuns, OutcomeTelemetry
from prenet.data.split_rule import assign
from prenet.outcome.crossval import ablate_groups, leave_group_out, mean_over_groups, naive_guess, score_predictions
from prenet.outcome.evaluation import auc, interval_coverage, paired_difference, r2, reliability
from prenet.outcome.models import (
    accuracy_at,
    failure_probability,
    interval_bounds,
    labels,
    load,
    may_take_off,
    predict_targets,
    residual_key,
    take_off_interval,
    thresholds_for,
)
from prenet.rendering import figures

_SHARED: dict = {}


def _load_shared(runs_path: str, telemetry_path: str, thr: dict, fallback: dict, kw: dict, stack_folds: int) -> None:
    """Worker initializer: the labelled runs (all, development, holdout) and telemetry, read once per process; the
    folds the leave-one-group-out refits learn their stack's weights in (0: the trained models do not stack)."""
    runs = labels(read_table(runs_path, OutcomeRuns), thr, fallback)
    _SHARED.update(
        runs=runs,
        dev=runs.filter(pl.col("split") != "holdout"),
        hold=runs.filter(pl.col("split") == "holdout"),
        tel=read_table(telemetry_path, OutcomeTelemetry),
        thr=thr,
        fallback=fallback,
        kw=kw,
        stack_folds=stack_folds,
    )


def _refit(item: tuple[str, object]) -> dict:
    """One refit unit: leave one domain / optimizer out, or the group ablation at one epoch."""
    kind, v, epochs = item
    s, kw = _SHARED, _SHARED["kw"]
    if kind == "ablation":
        return ablate_groups(s["dev"], s["hold"], s["tel"], int(v), params=kw["params"], n_boot=kw["n_boot"], seed=kw["seed"])
    return leave_group_out(
        s["dev"],
        s["runs"],
        s["tel"],
        kind,
        str(v),
        thresholds=s["thr"],
        fallback=s["fallback"],
        epochs=list(epochs),
        stack_folds=s["stack_folds"],
        **kw,
    )


def evaluate_outcome(cfg: DictConfig) -> dict:
    """Write ``metrics/outcome.json``, ``paths.outcome_predictions`` and the outcome figures."""
    o = cfg.outcome
    n_boot, seed = int(o.evaluate.bootstrap), int(cfg.seed)
    params = OmegaConf.to_container(o.predictor, resolve=True)
    t0 = time.monotonic()
    runs = read_artifact(cfg, "outcome_runs")
    hold = runs.filter(pl.col("split") == "holdout")
    rule = outcome_split_rule(cfg)
    if any(assign(r, rule) != "holdout" for r in hold["run_id"].to_list()):
        raise RuntimeError("evaluate_outcome: a run marked holdout is not in the frozen holdout; rerun the corpus stage")
    tel = read_artifact(cfg, "outcome_telemetry")
    models, manifest = load(cfg.paths.outcome_models)
    thr, fallback = manifest["thresholds"], manifest["pooled_thresholds"]
    hold = labels(hold, thr, fallback)
    dev = labels(runs.filter(pl.col("split") != "holdout"), thr, fallback)
    y, yf = hold["final_test_accuracy"].to_numpy(), hold["failure"].to_numpy()
    ids, doms = hold["run_id"].to_list(), hold["domain"].to_list()
    results: dict = {}
    ablation: dict = {}
    by_domain: dict = {}
    calibration: dict = {}
    preds = []
    nominal = float(o.evaluate.interval[1]) - float(o.evaluate.interval[0])
    for e in manifest["epochs"]:
        per, out = {}, {}
        fitted = {fs: {t: models[("pooled", e, fs, t)] for t in manifest["targets"]} for fs in manifest["feature_sets"]}
        for fs in manifest["feature_sets"]:
            out[fs] = predict_targets(fitted[fs], hold, tel, e, fs)
        # the default call, predict(table): neither the domain nor the schedule stated
        unstated = predict_targets(fitted["telemetry"], hold, tel, e, "telemetry", known_domain=False, known_schedule=False)
        # the failure probability as predict() answers it (the loss/accuracy-only ablation keeps its classifier's)
        for pred, stated in ((out["telemetry"], True), (unstated, False)):
            run_thr = [thresholds_for(manifest, d if stated else None)["failure_threshold"] for d in doms]
            pred["failure"] = failure_probability(
                pred["failure"], pred["final_test_accuracy"], manifest["residuals"].get(residual_key(e, stated)), np.array(run_thr)
            )
        for fs in manifest["feature_sets"]:
            per[fs] = score_predictions(hold, out[fs], n_boot, seed, thr, fallback)
        per["telemetry_unstated"] = score_predictions(hold, unstated, n_boot, seed, thr, fallback)
        per["naive"] = score_predictions(hold, naive_guess(hold, tel, e), n_boot, seed, thr, fallback)
        results[f"epoch_{e}"] = per
        ablation[f"epoch_{e}"] = {
            "r2": paired_difference(r2, y, out["telemetry"]["final_test_accuracy"], out["loss_acc"]["final_test_accuracy"], n_boot, seed),
            "failure_auc": paired_difference(auc, yf, out["telemetry"]["failure"], out["loss_acc"]["failure"], n_boot, seed),
        }
        pa, pf = out["telemetry"]["final_test_accuracy"], out["telemetry"]["failure"]
        cal = {"interval_nominal": nominal, "failure_reliability": reliability(yf, pf)}
        spec, take = manifest.get("take_off", {}), models.get(("pooled", e, "telemetry", "take_off"))
        base = spec.get("base_rate", {}).get(str(e))
        acc_e = accuracy_at(hold, tel, e)
        for kind, pred in (("stated", pa), ("unstated", unstated["final_test_accuracy"])):
            key = residual_key(e, kind == "stated")
            lo, hi = interval_bounds(pred, manifest["residual_quantiles"][key], manifest.get("residual_bands", {}).get(key))
            if take is not None and take.constant is None and base is not None and 0 < base < 1:  # as predict() answers
                p_take = predict_targets({"t": take}, hold, tel, e, "telemetry", known_domain=kind == "stated", known_schedule=kind == "stated")["t"]
                flagged = may_take_off(acc_e, p_take, base, float(spec["slow_below"]))
                took = spec.get("took_off_final_accuracy", {}).get(str(e), [])
                lo, hi = take_off_interval(lo, hi, p_take, flagged, took, float(o.evaluate.interval[-1]))
            cal["interval_coverage" + ("" if kind == "stated" else "_unstated")] = interval_coverage(y, lo, hi)
        calibration[f"epoch_{e}"] = cal
        for (d,), g in hold.with_row_index("i").group_by(["domain"], maintain_order=True):
            i = g["i"].to_numpy()
            by_domain.setdefault(d, {})[f"epoch_{e}"] = score_predictions(
                g, {t: v[i] for t, v in out["telemetry"].items()}, n_boot, seed, thr, fallback
            )
        for fs in manifest["feature_sets"]:
            preds += [
                {
                    "run_id": r,
                    "domain": d,
                    "epoch": e,
                    "feature_set": fs,
                    "final_test_accuracy": float(a),
                    "predicted_accuracy": float(p),
                    "failure": int(f),
                    "failure_probability": float(q_),
                }
                for r, d, a, p, f, q_ in zip(ids, doms, y, out[fs]["final_test_accuracy"], yf, out[fs]["failure"])
            ]
    epochs = list(manifest["epochs"])
    # never seen: a whole domain (its development and holdout runs), or a whole optimizer; and the group ablation —
    # independent refits, run in `outcome.evaluate.workers` processes
    items = []
    lodo_epochs = tuple(epochs) if o.evaluate.leave_one_out else tuple(e for e in o.evaluate.leave_one_domain_out_epochs if e in epochs)
    if lodo_epochs:
        items += [("domain", v, lodo_epochs) for v in runs["domain"].unique(maintain_order=True).to_list()]
    if o.evaluate.leave_one_out:
        items += [("optimizer", v, tuple(epochs)) for v in runs["optimizer"].unique(maintain_order=True).to_list()]
    if o.evaluate.ablate_groups:
        items += [("ablation", e, ()) for e in epochs]
    _SHARED.clear()
    done = dict(
        zip(
            items,
            run_items(
                _refit,
                items,
                workers=int(o.workers),
                threads=int(cfg.threads),
                desc="evaluate_outcome refits",
                progress=bool(cfg.progress),
                unit="fit",
                initializer=_load_shared,
                initargs=(
                    str(cfg.paths.outcome_runs),
                    str(cfg.paths.outcome_telemetry),
                    thr,
                    fallback,
                    dict(params=params, n_boot=n_boot, seed=seed),
                    int(o.evaluate.cv_folds) if manifest.get("take_off", {}).get("stack") else 0,
                ),
            ),
        )
    )
    lodo = {str(v): r for (k, v, _), r in done.items() if k == "domain"}
    looo = {str(v): r for (k, v, _), r in done.items() if k == "optimizer"}
    groups = {f"epoch_{e}": r for (k, e, _), r in done.items() if k == "ablation"}
    importances = {}
    for e in epochs:
        m = models[("pooled", e, "telemetry", "final_test_accuracy")]
        if m.model is not None:
            gain = m.model.get_booster().get_score(importance_type="gain")
            names = manifest["features"][f"{e}|telemetry"]
            total = sum(gain.values()) or 1.0
            imp = {names[int(k[1:])]: v / total for k, v in gain.items()}
            importances[f"epoch_{e}"] = dict(sorted(imp.items(), key=lambda kv: -kv[1])[:15])
    pdf = pl.DataFrame(preds) if preds else pl.DataFrame()
    write_artifact(pdf, cfg, "outcome_predictions")
    plots = Path(cfg.paths.plots)
    figures.outcome_by_epoch(results, plots / "outcome_by_epoch.png")
    e2 = min(2, max(epochs))
    figures.outcome_scatter(
        pdf.filter((pl.col("epoch") == e2) & (pl.col("feature_set") == "telemetry")) if pdf.height else pdf,
        plots / "outcome_scatter.png",
        f"holdout: predicted vs final test accuracy at epoch {e2}",
    )
    figures.reliability_curve({k: v["failure_reliability"] for k, v in calibration.items()}, plots / "outcome_reliability.png")
    summary = {
        "holdout_r2_epoch2": results.get(f"epoch_{e2}", {}).get("telemetry", {}).get("r2"),
        "holdout_auc_epoch3": results.get(f"epoch_{min(3, max(epochs))}", {}).get("telemetry", {}).get("failure_auc"),
        "holdout_r2_epoch2_unstated": results.get(f"epoch_{e2}", {}).get("telemetry_unstated", {}).get("r2"),
        "lodo_mean_r2_epoch2": mean_over_groups(lodo, e2, "telemetry", "r2") if lodo else None,
        "lodo_mean_r2_epoch2_parts_stated": mean_over_groups(lodo, e2, "telemetry_parts_stated", "r2") if lodo else None,
        **{
            f"lodo_mean_r2_epoch2_{k}": mean_over_groups(lodo, e2, "telemetry_r2_by_phase", k) if lodo else None
            for k in ("prior", "without_takeoff", "takeoff")
        },
        "looo_mean_r2_epoch2": mean_over_groups(looo, e2, "telemetry", "r2") if looo else None,
    }
    metrics = {
        "holdout_runs": hold.height,
        "dev_runs": dev.height,
        "summary": summary,
        "results": {"pooled": results},
        "by_domain": by_domain,
        "ablation": {"pooled": ablation},
        "group_ablation": groups,
        "leave_one_domain_out": lodo,
        "leave_one_optimizer_out": looo,
        "calibration": calibration,
        "feature_importance": importances,
        "thresholds": thr,
        "bootstrap": n_boot,
        "threads": int(cfg.threads),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    record_metrics(cfg, "outcome", metrics)
    print(
        f"evaluate_outcome: {hold.height} holdout runs; epoch {e2}: R² {summary['holdout_r2_epoch2']:.3f}; "
        f"leave-one-domain-out R² {summary['lodo_mean_r2_epoch2'] if lodo else float('nan'):.3f}"
    )
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate_outcome)()
