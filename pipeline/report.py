"""Stage ``report``: one self-contained HTML page and PNG figures from the metrics of the same run."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from omegaconf import DictConfig

from pipeline.artifacts import artifact, read_artifact
from pipeline.config import hydra_entry
from pipeline.record import last_wall_times
from prenet.data.io import read_table, write_text
from prenet.planner.intervals import RatioSet, StepsErrors, StepTimeErrors, read_errors
from prenet.rendering import figures, summary_figures
from prenet.rendering.html import image, page, table
from prenet.rendering.results import cost_check_records

METRIC_COLS = ["n", "mape_pct", "median_ape_pct", "rmse_ms", "within_20pct"]


def _unseen_section(u: dict, folds_csv: Path) -> str:
    if not u:
        return "<p class=note>Not in this run (evaluate.unseen_hardware.enabled is false; experiment=full runs it: README Results quote its reference run).</p>"
    per_gpu = ""
    if folds_csv.exists():
        folds = read_table(folds_csv)
        recipes_ = sorted(folds["recipe"].unique().to_list())
        rows_ = {}
        for r in folds.sort("source", "op", "held_out").iter_rows(named=True):
            rows_.setdefault(f"{r['source']}/{r['op']} · {r['held_out']}", {})[r["recipe"]] = r["mape_pct"]
        per_gpu = "<h3>MAPE % per layer type and held-out GPU</h3>" + table(rows_, recipes_, "dataset/op · held-out GPU")
    recipes = sorted(u["mean_mape_pct"])
    rows = {k: {r: v.get(r, float("nan")) for r in recipes} for k, v in u["by_source_op"].items()}
    rows["mean over folds"] = u["mean_mape_pct"]
    rows["median over folds"] = u["median_fold_mape_pct"]
    return (
        "<p class=note>Each GPU of a dataset is held out in turn; the models train on the dataset's other GPUs and predict the "
        f"held-out one from its spec sheet alone ({u['folds']} folds). Cells: mean MAPE % over the held-out GPUs. roofline_target "
        "fits ln(time / roofline) on all features; prenet_recipe is PreNeT (ln time, all features); justus_recipe has no computational features; "
        "roofline is max(FLOPs/peak, bytes/bandwidth) with no learning.</p>" + table(rows, recipes, "dataset / op") + per_gpu
    )


CONV_COLS = ["n", "n_both", "median_ape_pct", "mean_ape_pct", "within_pct", "miss_rate", "spearman"]


OUT_COLS = ["n", "r2", "r2_low", "r2_high", "mae", "failure_auc", "failure_auc_low", "failure_auc_high", "failures", "relative_class_accuracy"]


def _outcome_sections(mdir: Path, plots: Path, out: Path) -> list[tuple[str, str]]:
    """Early success: holdout R² / AUC by epoch with intervals beside the baselines, per domain, never-seen groups
    (domain, optimizer), feature-group ablation, calibration, importances, corpus."""
    oc = json.loads((mdir / "outcome.json").read_text())
    cp = json.loads((mdir / "corpus.json").read_text())
    rows = {f"{ep.replace('_', ' ')} · {fs}": m for ep, per in oc["results"]["pooled"].items() for fs, m in per.items()}
    dom_rows = {f"{d} · {ep.replace('_', ' ')}": m for d, eps in oc.get("by_domain", {}).items() for ep, m in eps.items()}
    lo_rows = {
        f"{kind} · {g} · {ep.replace('_', ' ')} · {fs}": m
        for kind, key in (("domain", "leave_one_domain_out"), ("optimizer", "leave_one_optimizer_out"))
        for g, v in oc.get(key, {}).items()
        for ep, per in v.items()
        if ep.startswith("epoch_")
        for fs, m in per.items()
    }

    def abl_row(a: dict) -> dict:
        return {
            "ΔR²": a["r2"]["difference"],
            "ΔR² low": a["r2"]["low"],
            "ΔR² high": a["r2"]["high"],
            "p (ΔR² ≤ 0)": a["r2"]["p_value"],
            "ΔAUC": a["failure_auc"]["difference"],
            "p (ΔAUC ≤ 0)": a["failure_auc"]["p_value"],
        }

    abl = {f"{ep.replace('_', ' ')} · telemetry vs loss_acc": abl_row(a) for ep, a in oc["ablation"]["pooled"].items()}
    abl.update({f"{ep.replace('_', ' ')} · without {g}": abl_row(a) for ep, per in oc.get("group_ablation", {}).items() for g, a in per.items()})
    cal = {
        ep.replace("_", " "): {
            "interval coverage": c["interval_coverage"],
            "coverage, nothing stated": c.get("interval_coverage_unstated"),
            "nominal": c["interval_nominal"],
            "failure ECE": c["failure_reliability"]["ece"],
        }
        for ep, c in oc.get("calibration", {}).items()
    }
    imp = "".join(
        f"<h3>Feature importance (gain share), pooled model, {ep.replace('_', ' ')}</h3>"
        + table({k: {"gain share": v} for k, v in d.items()}, ["gain share"], "feature")
        for ep, d in oc["feature_importance"].items()
    )
    corpus_rows = {d: v for d, v in cp["domains"].items()}
    figs = ""
    if oc["ablation"].get("pooled"):
        figs += image(
            summary_figures.ablation(oc["ablation"]["pooled"], out / "outcome_ablation.png"), "telemetry gain over loss/accuracy only, pooled"
        )
    if oc.get("feature_importance"):
        figs += image(
            summary_figures.importances(oc["feature_importance"], out / "outcome_importance.png"), "feature importance, pooled telemetry model"
        )
    prov = cp.get("provenance", {})
    src = (
        f"vendored corpus made {prov.get('generated')} at commit {str(prov.get('code_commit', ''))[:10]} (data/outcome/vendored/provenance.json)"
        if cp.get("source") == "vendored"
        else "generated in this run"
    )
    return [
        (
            "Early success: corpus",
            f"<p class=note>{cp['runs']} runs of {cp['epochs']} epochs, {src}; failure rate = share of a domain's runs "
            f"that diverge or end below half its 90th-percentile accuracy. Recorder overhead (with vs without): median {cp.get('overhead_pct_median')} %.</p>"
            + table(corpus_rows, ["runs", "holdout", "failure_rate", "diverged", "median_final_accuracy", "median_wall_seconds"], "domain"),
        ),
        (
            "Early success: holdout",
            f"<p class=note>{oc['holdout_runs']} holdout runs (frozen by run-config hash); 95 % bootstrap intervals "
            f"({oc['bootstrap']} resamples). One pooled model with the domain as a feature. telemetry = every feature group; loss_acc = loss and "
            "accuracy only; naive = the validation accuracy at that epoch taken as the final accuracy.</p>"
            + image(plots / "outcome_by_epoch.png", "R² and failure AUC by epoch")
            + image(plots / "outcome_scatter.png", "predicted vs final test accuracy")
            + table(rows, OUT_COLS, "epoch · model")
            + "<h3>Per domain (telemetry model)</h3>"
            + table(dom_rows, OUT_COLS, "domain · epoch"),
        ),
        (
            "Early success: never-seen domain or optimizer",
            "<p class=note>Fitted on the development runs of the other groups, scored on every run "
            "of the held-out group; a held-out domain is answered as unknown (domain features masked), as for a user's new domain.</p>"
            + table(lo_rows, OUT_COLS, "held out · group · epoch · model"),
        ),
        (
            "Early success: ablation, calibration and importances",
            "<p class=note>Paired bootstrap over the same holdout runs; positive = the "
            "telemetry (or the group) helps; p = share of resamples where it does not. Coverage: share of holdout runs inside "
            "predict()'s interval.</p>"
            + figs
            + table(abl, ["ΔR²", "ΔR² low", "ΔR² high", "p (ΔR² ≤ 0)", "ΔAUC", "p (ΔAUC ≤ 0)"], "epoch · comparison")
            + image(plots / "outcome_reliability.png", "failure-probability reliability")
            + table(cal, ["interval coverage", "coverage, nothing stated", "nominal", "failure ECE"], "epoch")
            + imp,
        ),
    ]


def _cost_check(mdir: Path, plots: Path) -> str:
    """The full-data cost checks: this run's and the reference run's under data/reference (labelled as such)."""
    return "".join(_one_cost_check(cc, ref_dir, plots) for cc, ref_dir in cost_check_records(mdir))


def _one_cost_check(cc: dict, ref_dir: Path | None, plots: Path) -> str:
    """One cost check's table and figure (``ref_dir``: the reference run's folder, None for this run)."""
    where, fig = "this run", plots / "forecast_cost.png"
    if ref_dir is not None:
        where, fig = f"reference run of {cc.get('measured')}: <code>{cc.get('reproduce')}</code>", ref_dir / "forecast_cost.png"
    if not cc.get("enabled"):
        return "<p class=note>Full-data cost check not run (convergence.cost_check.enabled=false; on by default, at 30,000 samples with <code>convergence=full</code>).</p>"
    rows = {}
    for k, r in cc["tasks"].items():
        for name, v in r["variants"].items():
            rows[f"{k} · {name}"] = {
                "regime": r["regime"],
                "n_train": r["n_train"],
                "steps": r["steps"],
                "train_seconds": r["train_seconds"],
                "forecast_seconds": v["seconds"],
                "cost_ratio": v["cost_ratio"],
                "drift": v.get("drift"),
                "median_abs_pct_error": v.get("median_abs_pct_error"),
            }
    return (
        f"<h3>Full-data fine-tunes vs their forecasts ({where})</h3>"
        + table(rows, ["regime", "n_train", "steps", "train_seconds", "forecast_seconds", "cost_ratio", "drift", "median_abs_pct_error"], "run")
        + image(fig, "full-data fine-tunes, real vs forecast")
    )


def _convergence_sections(mdir: Path, plots: Path) -> list[tuple[str, str]]:
    """Convergence predictor: holdout errors per target and source, gaps, cost, regimes, the drift flag."""
    cv = json.loads((mdir / "convergence.json").read_text())
    fc = json.loads((mdir / "forecast.json").read_text())
    pre = json.loads((mdir / "pretrain.json").read_text())
    noise = cv.get("noise_floor") or {}

    def floor(t: str) -> str:
        n = noise.get(t)
        return (
            f"<p class=note>Measurement noise floor: the same configuration with another seed reaches this target "
            f"{n['median_seed_spread_pct']:.1f} % sooner or later (median over {n['configs']} configurations).</p>"
            if n
            else "<p class=note>Measurement noise floor: not measurable in this run (one seed per configuration; "
            "<code>convergence=full</code> runs two).</p>"
        )

    head = "".join(f"<h3>{t}</h3>" + floor(t) + table(v, CONV_COLS, "source") for t, v in cv["holdout"].items())
    ran = any(v.get("n_curves") for v in cv["gaps"].values())
    gaps = "".join(
        f"<h3>{g} — median curve distance {v['median_curve_distance'] if v['median_curve_distance'] is None else round(v['median_curve_distance'], 4)}</h3>"
        + table(v["steps"], CONV_COLS, "target")
        for g, v in cv["gaps"].items()
        if ran
    ) or (
        "<p class=note>Not run here: the full-kernel gap analysis is evaluative and off by default "
        "(<code>convergence.forecast.full_kernel=none</code>); <code>experiment=full</code> runs it on the holdout.</p>"
    )
    checks = {
        f"{t} projection k={k}": {"relative Frobenius error": v["relative_frobenius_error"], "seconds": v["seconds"]}
        for t, c in fc["ntk_checks"].items()
        for k, v in c["projection"].items()
    }
    checks.update(
        {
            f"{t} subset spectrum (top-10 eigenvalues)": {"relative error": c.get("subset_spectrum_top10_rel_error")}
            for t, c in fc["ntk_checks"].items()
        }
    )
    return [
        (
            "Convergence: pre-trained networks",
            table(pre["tasks"], ["arch", "dataset", "pretrain_samples", "train_accuracy", "test_accuracy", "n_params"], "task"),
        ),
        (
            "Convergence: steps to target on the holdout",
            f"<p class=note>{cv['holdout_configs']} holdout configurations of {cv['configs']} "
            "(frozen by configuration hash). forecast: NTK on a subset + ODE/SDE; corrected: re-linearized after the drift probe; "
            "curve_fit: power-law/exponential fit to the first part of the real curve; probe_regressor: XGBoost on one-batch features "
            "trained on the development configurations. Errors are absolute % errors of steps; miss rate = target reached by only one of "
            "prediction and reality.</p>"
            + head
            + image(plots / "convergence_steps.png", "predicted vs real steps")
            + image(plots / "convergence_curves.png", "predicted vs real loss curves"),
        ),
        (
            "Convergence: where the error comes from",
            "<p class=note>Gaps measured on the holdout configurations.</p>"
            + gaps
            + table(checks, ["relative Frobenius error", "relative error", "seconds"], "NTK estimator check"),
        ),
        (
            "Convergence: cost and reliability",
            table({"cost (holdout)": cv["cost"]}, list(cv["cost"]))
            + table(
                cv.get("cost_by_task", {}),
                [
                    "configs",
                    "n_train",
                    "median_steps",
                    "median_train_seconds",
                    "median_forecast_seconds",
                    "median_ratio_forecast",
                    "median_ratio_forecast_ode",
                    "median_ratio_corrected",
                ],
                "task (all configurations)",
            )
            + _cost_check(mdir, plots)
            + table({"drift flag": cv["drift_flag"]}, list(cv["drift_flag"]))
            + table(cv["by_regime"], ["n", "forecast_median_ape_pct", "corrected_median_ape_pct"], "regime")
            + table(cv["by_task_lr"], ["regime", "median_drift", "forecast_median_ape_pct", "corrected_median_ape_pct"], "task / lr / momentum"),
        ),
    ]


#: Figures other stages draw (under paths.plots), copied next to the page so every figure is also a file.
STAGE_FIGURES = (
    "convergence_curves.png",
    "convergence_steps.png",
    "forecast_cost.png",
    "outcome_by_epoch.png",
    "outcome_scatter.png",
    "outcome_reliability.png",
)


def _planner_section(eo: dict, intervals: Path, zoo, out: Path) -> str:
    """Peak-memory check of the zoo and the error ratios behind `prenet plan`'s intervals: what ``evaluate_ops`` and
    ``evaluate_convergence`` measured (nothing of the PreNeT layer recipe)."""
    parts = []
    mem = eo.get("memory")
    if mem and zoo is not None and zoo.height:
        fig = summary_figures.memory_scatter(zoo, out / "memory_scatter.png")
        rows = {
            f"{r['model']} b{r['batch_size']} {r['optimizer']}": {
                "measured MiB": r["measured_memory_bytes"] / 2**20,
                "predicted MiB": r["predicted_memory_bytes"] / 2**20,
                "measured / predicted": r["measured_memory_bytes"] / r["predicted_memory_bytes"],
            }
            for r in zoo.iter_rows(named=True)
            if r.get("measured_memory_bytes")
        }
        parts.append(
            "<h3>Peak training memory: predicted vs measured (zoo, CPU)</h3><p class=note>Predicted from the model alone "
            "(weights, gradients, optimizer state, batch, every tensor autograd saves, traced on the meta device, plus twice the largest "
            "of them during backward); measured from the profiler's allocator events during one real step. "
            f"MAPE {mem['mape_pct']:.1f} %, measured / predicted from {mem['ratio_min']:.2f} to {mem['ratio_max']:.2f} "
            f"(n = {mem['n']}); the planner calls a device 'tight' when the job fits only without the largest under-prediction.</p>"
            + image(fig, "peak memory, predicted vs measured")
            + table(rows, ["measured MiB", "predicted MiB", "measured / predicted"], "zoo step")
        )
    step = read_errors(intervals / "step_time_ops.json", StepTimeErrors)
    steps = read_errors(intervals / "steps.json", StepsErrors)
    assert isinstance(step, StepTimeErrors) and isinstance(steps, StepsErrors)
    groups: dict[str, RatioSet] = {}
    if step.local_whole_model and step.local_whole_model.ratios:
        groups["step time, local CPU (whole zoo steps)"] = step.local_whole_model
    if step.unseen_gpu and step.unseen_gpu.ratios:
        groups["step time, unseen GPU (layer deciles per fold)"] = step.unseen_gpu
    for tkey, per in steps.targets.items():
        if per.get("forecast") and per["forecast"].ratios:
            groups[f"steps, forecast, {tkey}"] = per["forecast"]
    if groups:
        cov = step.coverage
        fig = summary_figures.interval_ratios({k: list(v.ratios) for k, v in groups.items()}, cov, out / "interval_ratios.png")
        rows = {
            k: {
                **{c: v.summary()[c] for c in ("n", "low", "median", "high")},
                "leave-one-out coverage": "–" if v.loo_coverage is None else f"{100 * v.loo_coverage:.0f} %",
            }
            for k, v in groups.items()
        }
        parts.append(
            f"<h3>Error ratios behind the planner's {round(cov * 100)} % intervals</h3><p class=note>`prenet plan` multiplies each "
            "point prediction by the central quantiles of these measured / predicted ratios (wall time: of every product of a "
            "step-time ratio and a steps ratio). Few points make wide, uncertain intervals; leave-one-out coverage = how often "
            "an interval built from all the other ratios held the one left out (the nominal share is the target).</p>"
            + image(fig, "measured / predicted ratios")
            + table(rows, ["n", "low", "median", "high", "leave-one-out coverage"], "source")
        )
    return "".join(parts) or "<p class=note>No memory measurements or interval ratios in this run's metrics.</p>"


def _ops_section(mdir: Path, plots: Path, out: Path) -> str:
    """The op-level step-time model (``evaluate_ops``): holdout per op, unseen GPUs, whole zoo steps, fallback shares."""
    eo = json.loads((mdir / "evaluate_ops.json").read_text())
    h = eo["holdout"]
    cols = ["rows", "mape_pct", "median_ape_pct", "roofline_mape_pct", "noise_floor_pct"]
    parts = [
        "<p class=note>Each op of a traced training step: time = roofline ÷ efficiency, the efficiency learned per op family "
        "and device kind in (0, 1), so no prediction beats the roofline. Frozen holdout keyed by configuration.</p>",
        table({f"{r['device']} {r['precision']}": r for r in h["by_device_precision"]}, cols, "device / precision"),
        table({f"{r['device']} {r['family']}": r for r in h["by_family"]}, cols, "device / family"),
    ]
    zoo_csv, logo_csv = plots / "op_zoo.csv", plots / "op_unseen_gpu.csv"
    if zoo_csv.is_file():
        z = read_table(zoo_csv)
        parts.append(image(summary_figures.op_zoo_scatter(z, out / "op_zoo_scatter.png"), "zoo steps on the local CPU, op model vs measured"))
        parts.append(
            table(
                {f"{r['model']} b{r['batch_size']} {r['precision']}": r for r in z.iter_rows(named=True)},
                ["measured_ms", "predicted_ms", "roofline_ms", *(["prenet_recipe_ms"] if "prenet_recipe_ms" in z.columns else []), "fallback_share"],
                "zoo step",
            )
        )
    u = eo.get("unseen_gpu", {})
    if logo_csv.is_file() and u.get("folds"):  # ops.evaluate.unseen_gpu=false leaves the file empty
        parts.append(image(summary_figures.op_unseen_by_gpu(read_table(logo_csv), out / "op_unseen_by_gpu.png"), "op model per held-out GPU"))
        parts.append(table(u.get("per_family", {}), ["mape_pct", "roofline_mape_pct"], "family (mean over held-out GPUs)"))
    fb = eo.get("fallback", [])
    if fb:
        keys = sorted({k for r in fb for k in r if k.endswith("_share")})
        parts.append(
            "<h3>Share of each zoo step's predicted time by how it was estimated</h3>"
            + table({f"{r['model']} · {r['hardware']} · {r['precision']}": r for r in fb}, ["step_ms", *keys], "model · hardware · precision")
        )
    return "".join(parts)


def _glance(mdir: Path) -> str:
    """The README's Results tables (this run against the published figures), as HTML."""
    from prenet.rendering.results import results_tables

    tables = "".join(
        table(
            {label: {"this project": ours.replace("`", ""), "published": pub} for label, ours, pub in rows[1:]},
            ["this project", "published"],
            rows[0][0],
        )
        for rows in results_tables(mdir)
    )
    return (
        "<p class=note>This run's headline figures beside each method's published claim (on the authors' own data and "
        "hardware: for scale, not reproduced). The same tables are the README's Results section.</p>"
        "<div class=glance>" + tables + "</div>"
    )


def _provenance(mdir: Path) -> str:
    """The record files every number of the page comes from, with their MD5 (as in dvc.lock)."""
    rows = {p.name: {"md5": hashlib.md5(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size} for p in sorted(mdir.glob("*.json"))}
    return (
        "<p class=note>Every number on this page is read from these records of the same pipeline run (and the prediction "
        "tables beside them); `dvc metrics show` prints their headline scalars (data/metrics).</p>" + table(rows, ["md5", "bytes"], "file")
    )


def report(cfg: DictConfig) -> dict:
    """Render ``paths.report``/index.html and its figures from ``metrics/*.json`` and the holdout predictions."""
    mdir, out = Path(cfg.paths.plots), Path(cfg.paths.report)  # the stages' full records (pipeline/record.py)
    wall = last_wall_times(cfg)
    ev = json.loads((mdir / "evaluate.json").read_text())
    tr = json.loads((mdir / "train.json").read_text())
    sp = json.loads((mdir / "split.json").read_text())
    bm = json.loads((mdir / "benchmark.json").read_text())
    pred = read_artifact(cfg, "plots/holdout_predictions.csv")
    zoo = read_artifact(cfg, "plots/zoo_predictions.csv")
    out.mkdir(parents=True, exist_ok=True)
    cost_check = json.loads((mdir / "forecast_cost.json").read_text()).get("enabled") if (mdir / "forecast_cost.json").is_file() else False
    for name in STAGE_FIGURES:
        if name == "forecast_cost.png" and not cost_check:
            (out / name).unlink(missing_ok=True)  # a figure of an earlier run would not match this run's metrics
            continue
        if (Path(cfg.paths.plots) / name).is_file():
            shutil.copyfile(Path(cfg.paths.plots) / name, out / name)
    hw_fig = summary_figures.bar_by_hardware(ev["by_hardware"], ev["noise_floor"], out / "holdout_mape_by_hardware.png")
    folds_csv = Path(cfg.paths.plots) / "unseen_hardware.csv"
    folds = read_table(folds_csv) if folds_csv.exists() else None
    logo_fig = summary_figures.logo_by_gpu(folds, out / "unseen_hardware_by_gpu.png") if folds is not None and folds.height else None
    recipes = list(ev["recipes"])
    scatter = figures.scatter_predicted_vs_measured(pred, out / "holdout_scatter.png", f"holdout: {ev['predictor']} ({ev['feature_set']})")
    bars = figures.bar_errors(ev["by_op_source"], ev["noise_floor"], out / "holdout_mape.png", "holdout MAPE by op and source")
    wm_fig = figures.scatter_whole_models(zoo, recipes, out / "whole_model_scatter.png")
    wm = ev["whole_model"]
    wm_rows = {m: {f"{r} MAPE %": wm[r]["by_model"][m]["mape_pct"] for r in recipes} for m in wm[recipes[0]]["by_model"]}
    wm_rows["all zoo steps"] = {f"{r} MAPE %": wm[r]["overall"]["mape_pct"] for r in recipes}
    zoo_rows = {
        f"{r['model']} b{r['batch_size']} {r['optimizer']}": {"measured_ms": r["measured_ms"], **{f"{n}_ms": r[f"{n}_ms"] for n in recipes}}
        for r in zoo.iter_rows(named=True)
    }
    recipe_rows = {r: {"holdout MAPE %": v["overall"]["mape_pct"], "holdout RMSE ms": v["overall"]["rmse_ms"]} for r, v in ev["recipes"].items()}
    sel_rows = {k: {"median val MAPE %": v} for k, v in tr.get("selection_val_mape_median", {}).items()}
    nf = ", ".join(f"{k.replace('_median_spread_pct', '')}: {v:.2f} %" for k, v in ev["noise_floor"].items())
    sections = [
        ("At a glance", _glance(mdir)),
        (
            "Run",
            table(
                {"benchmark": {**bm, "wall_s": wall.get("benchmark", {}).get("wall_s", "–")}},
                ["hardware_id", "threads", "measured", "planned", "noise_floor_median_spread_pct", "wall_s"],
            )
            + table({"split": sp}, ["train", "val", "holdout", "holdout_share"])
            + f"<p class=note>Predictor <b>{ev['predictor']}</b>, feature set <b>{ev['feature_set']}</b>, trained in {wall.get('train', {}).get('train_wall_s', '–')} s with {tr['threads']} thread(s) (wall times: the run log {cfg.paths.run_log}, not DVC-tracked).</p>",
        ),
        *([("Step time at the op level", _ops_section(mdir, Path(cfg.paths.plots), out))] if (mdir / "evaluate_ops.json").is_file() else []),
        (
            "Holdout errors (frozen 20 %)",
            f"<p class=note>Measurement noise floor (median run-to-run spread): {nf}. Errors below it are not meaningful.</p>"
            + table({"overall": ev["overall"]}, METRIC_COLS)
            + table(ev["by_op"], METRIC_COLS, "op")
            + table(ev["by_op_source"], METRIC_COLS, "op / source")
            + table(ev["by_hardware"], METRIC_COLS, "hardware"),
        ),
        (
            "Predicted vs measured",
            image(scatter, "predicted vs measured on the holdout")
            + image(bars, "holdout MAPE by op and source, noise floor dashed")
            + image(hw_fig, "holdout MAPE by hardware, noise floor dashed"),
        ),
        (
            "Recipes on the holdout",
            "<p class=note>prenet: the configured predictor on all PreNeT features (beyond the largest benchmarked "
            "layer it scales with the roofline time, train.extrapolate); justus_recipe: the same predictor "
            "without computational features (Justus et al. 2018); prenet_recipe: per layer type the best predictor × feature set on "
            "the validation split (PreNeT).</p>"
            + table(recipe_rows, ["holdout MAPE %", "holdout RMSE ms"], "recipe")
            + "<h3>Validation MAPE per predictor × feature set (median over layer types; PreNeT Table 4 shape)</h3>"
            + table(sel_rows, ["median val MAPE %"], "predictor / feature set"),
        ),
        (
            "Whole models on the local CPU",
            f"<p class=note>Step = Σ layers (train_step for layers with parameters, forward_backward "
            f"otherwise) + loss + the measured per-step overhead of a null step. Measurement noise floor (median spread of the measured steps): {wm['noise_floor_median_spread_pct']:.2f} %.</p>"
            + table(wm_rows, [f"{r} MAPE %" for r in recipes], "zoo model")
            + image(wm_fig, "whole-model step time, predicted vs measured")
            + table(zoo_rows, ["measured_ms", *[f"{n}_ms" for n in recipes]], "model / batch / optimizer"),
        ),
        (
            "Unseen hardware (leave one GPU out)",
            _unseen_section(ev.get("unseen_hardware", {}), folds_csv) + (image(logo_fig, "MAPE per held-out GPU and recipe") if logo_fig else ""),
        ),
        (
            "Planner: memory and intervals",
            _planner_section(
                json.loads((mdir / "evaluate_ops.json").read_text()) if (mdir / "evaluate_ops.json").is_file() else {},
                Path(cfg.paths.intervals),
                read_artifact(cfg, "plots/memory_zoo.csv") if artifact(cfg, "plots/memory_zoo.csv").is_file() else None,
                out,
            ),
        ),
        ("Validation (model selection)", table(tr["val"], METRIC_COLS, "op")),
        *_convergence_sections(mdir, Path(cfg.paths.plots)),
        *_outcome_sections(mdir, Path(cfg.paths.plots), out),
        ("Provenance", _provenance(mdir)),
    ]
    path = write_text(page(cfg.report.title, sections), out / "index.html")
    print(f"report: {path.resolve()}")
    return {"html": str(path)}


if __name__ == "__main__":
    hydra_entry(report)()
