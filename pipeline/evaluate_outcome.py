"""Stage ``evaluate_outcome``: the early-success models on the frozen holdout — R², MAE, failure ROC AUC and
relative-class accuracy per epoch and scope with bootstrap 95 % intervals, the telemetry vs loss/accuracy-only
ablation (paired bootstrap), feature importances, figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from omegaconf import DictConfig

from pipeline.config import hydra_entry
from pipeline.corpus import outcome_split_rule
from prenet.data.io import read_table, write_json, write_table
from prenet.data.schemas import OutcomeRuns, OutcomeTelemetry
from prenet.data.split import assign
from prenet.outcome.evaluation import auc, bootstrap, mae, paired_difference, r2
from prenet.outcome.features import design
from prenet.outcome.models import labels, load
from prenet.report import figures


def evaluate_outcome(cfg: DictConfig) -> dict:
    """Write ``metrics/outcome.json``, ``paths.outcome_predictions`` and the outcome figures."""
    n_boot, seed = int(cfg.outcome.evaluate.bootstrap), int(cfg.seed)
    runs = read_table(cfg.paths.outcome_runs, OutcomeRuns)
    hold = runs.filter(pl.col("split") == "holdout")
    rule = outcome_split_rule(cfg)
    if any(assign(r, rule) != "holdout" for r in hold["run_id"].to_list()):
        raise RuntimeError("evaluate_outcome: a run marked holdout is not in the frozen holdout; rerun the corpus stage")
    tel = read_table(cfg.paths.outcome_telemetry, OutcomeTelemetry).join(hold.select("run_id"), on="run_id", how="semi")
    models, manifest = load(cfg.paths.outcome_models)
    hold = labels(hold, manifest["thresholds"], manifest["pooled_thresholds"])
    scopes = {"pooled": hold, **{d: g for (d,), g in hold.group_by(["domain"], maintain_order=True) if d in manifest["scopes"]}}
    results: dict = {}
    ablation: dict = {}
    preds = []
    for scope, g in scopes.items():
        ids = g["run_id"].to_list()
        y, yf, yc = g["final_test_accuracy"].to_numpy(), g["failure"].to_numpy(), g["relative_class"].to_numpy()
        for e in manifest["epochs"]:
            per = {}
            out = {}
            for fs in manifest["feature_sets"]:
                X = design(tel, ids, e, fs)
                pa = models[(scope, e, fs, "final_test_accuracy")].predict(X)
                pf = models[(scope, e, fs, "failure")].predict(X)
                pc = models[(scope, e, fs, "relative_class")].predict(X).argmax(1)
                out[fs] = (pa, pf)
                pt, lo, hi = bootstrap(r2, [y, pa], n_boot, seed)
                m = {"n": len(y), "r2": pt, "r2_low": lo, "r2_high": hi}
                pt, lo, hi = bootstrap(mae, [y, pa], n_boot, seed)
                m.update({"mae": pt, "mae_low": lo, "mae_high": hi})
                pt, lo, hi = bootstrap(auc, [yf, pf], n_boot, seed)
                m.update({"failure_auc": pt, "failure_auc_low": lo, "failure_auc_high": hi, "failures": int(yf.sum())})
                m["relative_class_accuracy"] = float((pc == yc).mean()) if len(yc) else float("nan")
                per[fs] = m
                if scope == "pooled":
                    preds += [{"run_id": r, "domain": d, "epoch": e, "feature_set": fs, "final_test_accuracy": float(a), "predicted_accuracy": float(p),
                               "failure": int(f), "failure_probability": float(q)}
                              for r, d, a, p, f, q in zip(ids, g["domain"].to_list(), y, pa, yf, pf)]
            results.setdefault(scope, {})[f"epoch_{e}"] = per
            ablation.setdefault(scope, {})[f"epoch_{e}"] = {
                "r2": paired_difference(r2, y, out["telemetry"][0], out["loss_acc"][0], n_boot, seed),
                "failure_auc": paired_difference(lambda t, s: auc(t, s), yf, out["telemetry"][1], out["loss_acc"][1], n_boot, seed)}
    # feature importances (gain) of the pooled telemetry regressor at each epoch
    importances = {}
    for e in manifest["epochs"]:
        m = models[("pooled", e, "telemetry", "final_test_accuracy")]
        if m.model is not None:
            gain = m.model.get_booster().get_score(importance_type="gain")
            names = manifest["features"][f"{e}|telemetry"]
            total = sum(gain.values()) or 1.0
            imp = {names[int(k[1:])]: v / total for k, v in gain.items()}
            importances[f"epoch_{e}"] = dict(sorted(imp.items(), key=lambda kv: -kv[1])[:15])
    pdf = pl.DataFrame(preds) if preds else pl.DataFrame()
    write_table(pdf, cfg.paths.outcome_predictions)
    plots = Path(cfg.paths.plots)
    figures.outcome_by_epoch(results.get("pooled", {}), plots / "outcome_by_epoch.png")
    e2 = min(2, max(manifest["epochs"]))
    figures.outcome_scatter(pdf.filter((pl.col("epoch") == e2) & (pl.col("feature_set") == "telemetry")) if pdf.height else pdf,
                            plots / "outcome_scatter.png", f"holdout: predicted vs final test accuracy at epoch {e2}")
    metrics = {"holdout_runs": hold.height, "results": results, "ablation": ablation, "feature_importance": importances,
               "thresholds": manifest["thresholds"], "bootstrap": n_boot}
    write_json(metrics, Path(cfg.paths.metrics) / "outcome.json")
    p2 = results.get("pooled", {}).get(f"epoch_{e2}", {}).get("telemetry", {})
    print(f"evaluate_outcome: {hold.height} holdout runs; pooled epoch {e2}: R² {p2.get('r2', float('nan')):.3f}, "
          f"failure AUC {p2.get('failure_auc', float('nan')):.3f}")
    return metrics


if __name__ == "__main__":
    hydra_entry(evaluate_outcome)()
