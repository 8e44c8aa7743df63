"""Report figures drawn from the metrics files alone: step-time error by hardware, leave-one-GPU-out per held-out
GPU, peak memory predicted vs measured, the planner's interval ratios, the early-success ablation and importances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from prenet.planner.intervals import central
from prenet.rendering.figures import MAX_WIDTH_IN, SOURCE_COLORS, _save, plt


def bar_by_hardware(by_hardware: dict[str, dict], noise: dict[str, float], path: Path) -> Path:
    """Holdout MAPE per hardware (bars) with the measurement noise floor of its source (dashed): the local CPU's
    own, the Justus GPUs' published spread; NeuSight publishes none."""
    names = sorted(by_hardware, key=lambda n: by_hardware[n].get("mape_pct", 0.0))
    mape = [by_hardware[n].get("mape_pct", np.nan) for n in names]
    fig, ax = plt.subplots(figsize=(min(MAX_WIDTH_IN, max(MAX_WIDTH_IN * 0.8, 0.6 * len(names) + 2)), 4))
    colors = [SOURCE_COLORS["local"] if n.startswith("cpu") else "#555" for n in names]
    ax.bar(range(len(names)), mape, color=colors)
    for i, n in enumerate(names):
        nf = noise.get("local_median_spread_pct") if n.startswith("cpu") else noise.get("justus2018_median_spread_pct")
        if nf is not None:
            ax.plot([i - 0.4, i + 0.4], [nf, nf], "k--", lw=1)
        ax.text(i, mape[i], f"{by_hardware[n].get('n', 0)}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.margins(y=0.12)  # room for the row counts above the tallest bar
    ax.set_ylabel("holdout MAPE (%)")
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color="k", ls="--", lw=1, label="noise floor (numbers: holdout rows)")], fontsize=8, loc="upper left")
    ax.set_title("step-time error by hardware (frozen holdout, all layer types)")
    return _save(fig, path)


def logo_by_gpu(folds: pl.DataFrame, path: Path) -> Path:
    """Leave-one-GPU-out: mean MAPE over the layer types of each held-out GPU, per recipe."""
    recipes = sorted(folds["recipe"].unique().to_list())
    per = folds.group_by("held_out", "recipe").agg(pl.col("mape_pct").mean()).sort("held_out")
    gpus = sorted(per["held_out"].unique().to_list())
    fig, ax = plt.subplots(figsize=(MAX_WIDTH_IN, 4.4))
    w = 0.8 / max(len(recipes), 1)
    for j, r in enumerate(recipes):
        vals = [per.filter((pl.col("held_out") == g) & (pl.col("recipe") == r))["mape_pct"].to_list() or [np.nan] for g in gpus]
        ax.bar(np.arange(len(gpus)) + (j - (len(recipes) - 1) / 2) * w, [v[0] for v in vals], w, label=r)
    ax.set_xticks(range(len(gpus)), gpus, rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="MAPE (%) on the held-out GPU", title="unseen hardware: each GPU predicted from its spec sheet alone")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the axes: never over a bar
    return _save(fig, path)


def memory_scatter(zoo: pl.DataFrame, path: Path) -> Path:
    """Peak training memory per zoo step: predicted (meta-device trace) vs measured on the CPU (profiler)."""
    m = zoo.filter(pl.col("measured_memory_bytes").is_not_null())
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    mb = 2**20
    x, y = m["measured_memory_bytes"].to_numpy() / mb, m["predicted_memory_bytes"].to_numpy() / mb
    ax.scatter(x, y, s=18, color="#1f77b4")
    for r, xi, yi in zip(m.iter_rows(named=True), x, y):
        ax.annotate(f"{r['model']} b{r['batch_size']}", (xi, yi), fontsize=6, xytext=(3, 2), textcoords="offset points")
    lo, hi = float(min(x.min(), y.min())) * 0.8, float(max(x.max(), y.max())) * 1.2
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.15, label="±20 %")
    ax.set(xscale="log", yscale="log", xlabel="measured peak (MiB)", ylabel="predicted peak (MiB)", title="training-step memory, zoo on the CPU")
    ax.legend(fontsize=7)
    return _save(fig, path)


def interval_ratios(groups: dict[str, list[float]], coverage: float, path: Path) -> Path:
    """The measured / predicted ratios behind the planner's intervals, one strip per source, the central
    ``coverage`` share shaded."""
    names = [n for n, v in groups.items() if v]
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(names) + 1.6))
    for i, n in enumerate(names):
        r = np.asarray(groups[n], float)
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, r.size)
        ax.scatter(r, i + jitter, s=8, alpha=0.5)
        lo, hi = central(r, coverage)
        ax.plot([lo, hi], [i, i], "k-", lw=3, alpha=0.4)
        ax.text(1.01, i, f"[{lo:.2f}, {hi:.2f}] n={r.size}", fontsize=7, va="center", transform=ax.get_yaxis_transform())
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

    ax.xaxis.set_major_locator(FixedLocator([0.25, 0.5, 1, 2, 4, 8]))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set(xlabel="measured / predicted", title=f"errors behind the planner's {round(coverage * 100)} % intervals")
    return _save(fig, path)


def ablation(pooled: dict, path: Path) -> Path:
    """Telemetry minus loss/accuracy-only features (pooled): ΔR² and ΔAUC by epoch with 95 % bootstrap intervals."""
    epochs = sorted(int(k.split("_")[1]) for k in pooled)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((axes[0], "r2", "ΔR² (telemetry − loss/acc)"), (axes[1], "failure_auc", "Δ failure AUC")):
        d = [pooled[f"epoch_{e}"].get(key, {}) for e in epochs]
        v = np.array([x.get("difference", np.nan) for x in d], float)
        lo = np.array([x.get("low", np.nan) for x in d], float)
        hi = np.array([x.get("high", np.nan) for x in d], float)
        ax.errorbar(epochs, v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], fmt="o-", capsize=3)
        ax.axhline(0, color="k", lw=0.8)
        ax.set(xlabel="epochs seen", title=label, xticks=epochs)
    return _save(fig, path)


def importances(per_epoch: dict[str, dict[str, float]], path: Path, top: int = 10) -> Path:
    """Gain share of the most important features of the pooled telemetry model, per epoch."""
    eps = list(per_epoch)
    cols = min(2, len(eps))
    rows = -(-len(eps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(MAX_WIDTH_IN, 3.2 * rows + 0.5), squeeze=False)
    for ax in axes.ravel()[len(eps) :]:
        ax.axis("off")
    for ax, ep in zip(axes.ravel(), eps):
        items = sorted(per_epoch[ep].items(), key=lambda kv: -kv[1])[:top][::-1]
        ax.barh([k for k, _ in items], [v for _, v in items], color="#1f77b4")
        ax.set_title(ep.replace("_", " "), fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("feature importance (gain share), pooled telemetry model")
    return _save(fig, path)


def op_zoo_scatter(zoo: pl.DataFrame, path: Path) -> Path:
    """Whole zoo training steps on the local CPU, predicted through the op-level path vs measured, per precision (and the
    PreNeT recipe's FP32 predictions where the evaluate stage made them)."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    marks = {"fp32": ("o", "#1f77b4"), "bf16": ("s", "#d62728")}
    for prec, (m, c) in marks.items():
        sub = zoo.filter(pl.col("precision") == prec)
        if sub.height:
            ax.scatter(sub["measured_ms"], sub["predicted_ms"], marker=m, color=c, label=f"op model, {prec}")
    if "prenet_recipe_ms" in zoo.columns:
        sub = zoo.filter((pl.col("precision") == "fp32") & pl.col("prenet_recipe_ms").is_not_null())
        ax.scatter(sub["measured_ms"], sub["prenet_recipe_ms"], marker="x", color="#777", label="PreNeT recipe, fp32")
    lo = float(zoo["measured_ms"].min()) / 2
    hi = float(zoo["measured_ms"].max()) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted step (ms)", title="zoo training steps, local CPU")
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


def op_unseen_by_gpu(folds: pl.DataFrame, path: Path) -> Path:
    """Leave-one-GPU-out of the op model: MAPE of each family on each held-out GPU, beside the pure roofline's."""
    per = (
        folds.group_by("hardware_id")
        .agg(
            ((pl.col("mape") * pl.col("rows")).sum() / pl.col("rows").sum()).alias("op model"),
            ((pl.col("roofline_mape") * pl.col("rows")).sum() / pl.col("rows").sum()).alias("roofline"),
        )
        .sort("op model")
    )
    gpus = per["hardware_id"].to_list()
    fig, ax = plt.subplots(figsize=(MAX_WIDTH_IN, 4.4))
    x = np.arange(len(gpus))
    ax.bar(x - 0.2, per["op model"], 0.4, label="op model (roofline ÷ efficiency)")
    ax.bar(x + 0.2, per["roofline"], 0.4, label="roofline alone", color="#bbb")
    ax.set_xticks(x, gpus, rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="MAPE (%) on the held-out GPU", title="op model on unseen GPUs (forward ops, spec sheet only)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)
