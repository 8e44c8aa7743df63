"""Figures of the report, rendered by the project itself (matplotlib, Agg backend): no CDN, no network."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

#: Widest figure (pixels) the report shows at its natural size: the page's content column (prenet.rendering.html.CSS,
#: 1100 px less padding). A wider PNG is scaled down by the browser and its labels shrink below readable.
MAX_WIDTH_PX = 1060
#: Figures are written at this resolution; :data:`MAX_WIDTH_IN` is the widest figure that stays within the column.
DPI = 110
MAX_WIDTH_IN = MAX_WIDTH_PX / DPI


def layout_problems(fig, dpi: int) -> list[str]:
    """What a reader would not see whole at 100 % zoom: a figure wider than :data:`MAX_WIDTH_PX`, a text (title, label,
    tick label, legend, annotation) reaching past the canvas, or two panel titles overlapping. Empty when readable."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    problems = []
    if fig.get_figwidth() * dpi > MAX_WIDTH_PX + 0.5:
        problems.append(f"{fig.get_figwidth() * dpi:.0f} px wide (> {MAX_WIDTH_PX})")
    drawn = [(ax.get_title() or "axes", ax.get_tightbbox(renderer)) for ax in fig.axes if ax.get_visible() and ax.axison]
    drawn += [(t.get_text(), t.get_window_extent(renderer)) for t in fig.texts if t.get_visible() and t.get_text().strip()]
    drawn += [("legend", lg.get_window_extent(renderer)) for lg in fig.legends]
    for name, bb in drawn:  # an axes' tight box holds what is drawn of it: title, labels, tick labels, legend, texts
        if bb is not None and (bb.x0 < -1 or bb.y0 < -1 or bb.x1 > W + 1 or bb.y1 > H + 1):
            problems.append(f"{name[:40]!r} reaches past the canvas")
    titles = [ax.title for ax in fig.axes if ax.title.get_visible() and ax.title.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in titles]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            if boxes[i].overlaps(boxes[j]):
                problems.append(f"titles {titles[i].get_text()[:30]!r} and {titles[j].get_text()[:30]!r} overlap")
    return problems


def _save(fig, path: Path, dpi: int = DPI) -> Path:
    """Lay out, check (:func:`layout_problems`, recorded in the PNG's ``Description``: ``ok`` or the problems), write
    (creating the folder) and close a figure. Drawn once, at ``dpi``: the check's canvas is the image written (a
    ``savefig`` after it drew every figure again, ~40 % of the report stage's figure time)."""
    fig.set_dpi(dpi)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    problems = layout_problems(fig, dpi)
    path.parent.mkdir(parents=True, exist_ok=True)
    image = np.asarray(fig.canvas.buffer_rgba())
    plt.imsave(path, image, format="png", dpi=dpi, metadata={"Description": "; ".join(problems) or "ok"})
    plt.close(fig)
    return path


def wrap(title: str, width: int = 40) -> str:
    """A panel title broken into lines of at most ``width`` characters."""
    return textwrap.fill(title, width)


SOURCE_COLORS = {"local": "#d62728", "justus2018": "#1f77b4", "neusight2025": "#2ca02c"}


def scatter_predicted_vs_measured(pred: pl.DataFrame, path: Path, title: str) -> Path:
    """Log-log scatter of predicted vs measured ms per op, coloured by source, with the ±20 % band."""
    ops = sorted(pred.get_column("op").unique().to_list())
    cols = min(3, len(ops))
    rows = -(-len(ops) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(MAX_WIDTH_IN * cols / 3, 3.2 * rows + 0.4), squeeze=False)
    for ax in axes.ravel()[len(ops) :]:
        ax.axis("off")
    for ax, op in zip(axes.ravel(), ops):
        g = pred.filter(pl.col("op") == op)
        for src, color in SOURCE_COLORS.items():
            s = g.filter(pl.col("source") == src)
            if s.height:
                ax.scatter(s["measured_ms"], s["predicted_ms"], s=6, alpha=0.5, color=color, label=f"{src} ({s.height})")
        lo = float(min(g["measured_ms"].min(), g["predicted_ms"].min()))
        hi = float(max(g["measured_ms"].max(), g["predicted_ms"].max()))
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.15, label="±20 %")
        ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)", title=f"{op}")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title)
    return _save(fig, path)


def bar_errors(groups: dict[str, dict], noise: dict[str, float], path: Path, title: str) -> Path:
    """MAPE per group (op/source) as bars, with each source's measurement noise floor as a marker."""
    names = list(groups)[::-1]  # horizontal bars, first group on top: one readable row per group at any count
    mape = [groups[n].get("mape_pct", np.nan) for n in names]
    fig, ax = plt.subplots(figsize=(MAX_WIDTH_IN * 0.8, 0.24 * len(names) + 1.6))
    ax.barh(range(len(names)), mape, color=[SOURCE_COLORS.get(n.split("/")[-1], "#777") for n in names])
    for i, n in enumerate(names):
        nf = noise.get(f"{n.split('/')[-1]}_median_spread_pct")
        if nf is not None:
            ax.plot([nf, nf], [i - 0.4, i + 0.4], "k--", lw=1)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("holdout MAPE (%)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    used = sorted({n.split("/")[-1] for n in names} & set(SOURCE_COLORS))
    handles = [Patch(color=SOURCE_COLORS[s], label=s) for s in used] + [Line2D([], [], color="k", ls="--", lw=1, label="noise floor")]
    ax.legend(handles=handles, fontsize=8, loc="lower right")
    ax.set_title(title)
    return _save(fig, path)


def scatter_whole_models(df: pl.DataFrame, models: list[str], path: Path) -> Path:
    """Predicted vs measured whole-model step time (ms) of the zoo, one marker per recipe, ±20 % band."""
    fig, ax = plt.subplots(figsize=(6, 5))
    markers = ["o", "s", "^", "D"]
    for name, mk in zip(models, markers):
        ax.scatter(df["measured_ms"], df[f"{name}_ms"], marker=mk, s=28, alpha=0.75, label=name)
    lo = float(min(df["measured_ms"].min(), *(df[f"{n}_ms"].min() for n in models)))
    hi = float(max(df["measured_ms"].max(), *(df[f"{n}_ms"].max() for n in models)))
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.15, label="±20 %")
    for r in df.filter(pl.col("batch_size") == df["batch_size"].max()).iter_rows(named=True):
        ax.annotate(r["model"], (r["measured_ms"], r["measured_ms"]), fontsize=7, alpha=0.7)
    ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted step (ms)", title="whole-model training step, local CPU")
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


CURVE_STYLES = {
    "real": ("k", "-", 2.0),
    "forecast": ("#1f77b4", "--", 1.5),
    "forecast_ode": ("#17becf", "--", 1.2),
    "corrected": ("#2ca02c", ":", 1.8),
    "linear_sgd": ("#ff7f0e", "-.", 1.2),
    "curve_fit": ("#9467bd", (0, (1, 3)), 1.2),
}


def loss_curves(curves: dict[str, dict[str, tuple | None]], titles: dict[str, str], path: Path) -> Path:
    """One panel per configuration: full-training-set loss per SGD step, real and predicted (log scale)."""
    n = max(len(curves), 1)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(MAX_WIDTH_IN * cols / 3, 3.1 * rows), squeeze=False)
    for ax in axes.ravel()[len(curves) :]:
        ax.axis("off")
    for ax, (cid, srcs) in zip(axes.ravel(), curves.items()):
        for src, v in srcs.items():
            if v is None:
                continue
            color, ls, lw = CURVE_STYLES.get(src, ("#777", "-", 1.0))
            L = np.where(np.isfinite(v[0]), v[0], np.nan)
            ax.plot(np.arange(len(L)), L, color=color, ls=ls, lw=lw, label=src)
        ax.set(yscale="log", xlabel="SGD step", ylabel="training loss", title=wrap(titles.get(cid, cid), 44))
        ax.title.set_fontsize(8)
        ax.legend(fontsize=6)
    return _save(fig, path)


def steps_scatter(tgt: pl.DataFrame, path: Path, title: str) -> Path:
    """Predicted vs real steps (log-log, ±20 % band) per prediction source."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    colors = {"forecast": "#1f77b4", "corrected": "#2ca02c", "curve_fit": "#9467bd", "probe_regressor": "#8c564b"}
    both = tgt.filter(pl.col("real_steps").is_not_null() & pl.col("pred_steps").is_not_null())
    for src, color in colors.items():
        g = both.filter(pl.col("source") == src)
        if g.height:
            ax.scatter(np.maximum(g["real_steps"], 1), np.maximum(g["pred_steps"], 1), s=18, alpha=0.7, color=color, label=f"{src} ({g.height})")
    if both.height:
        hi = float(max(both["real_steps"].max(), both["pred_steps"].max(), 2))
        xs = np.geomspace(1, hi, 50)
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.15, label="±20 %")
    ax.set(xscale="log", yscale="log", xlabel="real steps", ylabel="predicted steps", title=title)
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def outcome_by_epoch(pooled: dict, path: Path) -> Path:
    """R² and failure AUC of the pooled models by epoch, with bootstrap 95 % intervals: telemetry (domain and schedule
    stated, and neither stated), loss/accuracy only, and the naive guess."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    epochs = sorted(int(k.split("_")[1]) for k in pooled)
    offsets = {"telemetry": -0.15, "telemetry_unstated": -0.05, "loss_acc": 0.05, "naive": 0.15}
    for fs, color in (("telemetry", "#1f77b4"), ("telemetry_unstated", "#9467bd"), ("loss_acc", "#ff7f0e"), ("naive", "#2ca02c")):
        for ax, (key, label) in zip(axes, (("r2", "R² of final test accuracy"), ("failure_auc", "failure ROC AUC"))):
            pts = [pooled[f"epoch_{e}"].get(fs, {}) for e in epochs]
            v = np.array([p.get(key, np.nan) for p in pts], dtype=float)
            lo = np.array([p.get(f"{key}_low", np.nan) for p in pts], dtype=float)
            hi = np.array([p.get(f"{key}_high", np.nan) for p in pts], dtype=float)
            off = offsets[fs]
            ax.errorbar(np.array(epochs) + off, v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], fmt="o-", color=color, capsize=3, label=fs)
            ax.set(xlabel="epochs seen", title=label, xticks=epochs)
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def reliability_curve(by_epoch: dict, path: Path) -> Path:
    """Reliability of the predicted failure probability on the holdout, one line per epoch (bins with ≥ 1 run),
    against the diagonal of perfect calibration; the legend gives each epoch's expected calibration error."""
    fig, ax = plt.subplots(figsize=(5.2, 5))
    for key, rel in by_epoch.items():
        b = rel.get("bins", [])
        if b:
            ax.plot(
                [r["predicted"] for r in b],
                [r["observed"] for r in b],
                "o-",
                ms=4,
                label=f"{key.replace('_', ' ')} (ECE {rel.get('ece', float('nan')):.3f})",
            )
    ax.plot([0, 1], [0, 1], "k-", lw=0.8)
    ax.legend(fontsize=7)
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="predicted failure probability",
        ylabel="observed failure frequency",
        title="holdout: failure-probability reliability",
    )
    ax.title.set_fontsize(9)
    return _save(fig, path)


def outcome_scatter(pred: pl.DataFrame, path: Path, title: str) -> Path:
    """Predicted vs actual final test accuracy per domain (holdout)."""
    fig, ax = plt.subplots(figsize=(5.2, 5))
    if pred.height:
        for (d,), g in pred.group_by(["domain"], maintain_order=True):
            ax.scatter(g["final_test_accuracy"], g["predicted_accuracy"], s=16, alpha=0.75, label=f"{d} ({g.height})")
        ax.legend(fontsize=7)
    ax.plot([0, 1], [0, 1], "k-", lw=0.8)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="final test accuracy", ylabel="predicted", title=title)
    ax.title.set_fontsize(9)
    return _save(fig, path)
