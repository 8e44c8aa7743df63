"""The plan as text: compact durations, dollars and step times, and the 80-column table ``prenet plan`` prints."""

from __future__ import annotations

import textwrap

from prenet.memory.estimate import GIB
from prenet.planner.plan import Plan, PlanRow


def format_duration(seconds: float) -> str:
    """A compact duration: 850ms, 42s, 12m, 3.4h, 2.1d, 230d (at most 6 characters below 10,000 days)."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m" if seconds >= 600 else f"{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    days = seconds / 86400
    return f"{days:.1f}d" if days < 100 else f"{days:,.0f}d"


def format_usd(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 0.01:
        return "<0.01"
    if v < 10:
        return f"{v:.2f}"
    if v < 1000:
        return f"{v:.0f}"
    return f"{v / 1000:.1f}k"


def format_step(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f}ms" if ms < 10 else (f"{ms:.0f}ms" if ms < 1000 else f"{seconds:.1f}s")


def parameters_text(n: int) -> str:
    """A parameter count as people write it: 8,965 parameters; 108.6 M parameters; 6.74 B parameters."""
    if n < 1e6:
        return f"{n:,} parameters"
    return f"{n / 1e9:.2f} B parameters" if n >= 1e9 else f"{n / 1e6:,.1f} M parameters"


def render_table(plan: Plan, rows: list[PlanRow]) -> str:
    """The plan as text no wider than 80 columns."""
    pct = round(plan.coverage * 100)
    m = plan.memory
    shape = "x".join(str(v) for v in plan.input_shape)
    top = rows[0] if rows else None
    head = f"time by op family on {top.hardware[:18]}: " if top else ""
    shares = [f"{f} {100 * v:.0f}%" for f, v in sorted((top.family_share if top else {}).items(), key=lambda kv: -kv[1])[:4] if v >= 0.005]
    while shares and len(head + ", ".join(shares)) > 80:  # the largest families that fit the line
        shares.pop()
    mix = ", ".join(shares)
    head_line = f"{plan.model} · batch {plan.batch_size} · {plan.optimizer} · {plan.precision}" + (
        f" · {plan.dataset_size:,} samples" if plan.dataset_size else ""
    )
    lines = [
        *textwrap.wrap(head_line, 80, subsequent_indent="  ", break_on_hyphens=False),
        f"input {shape} · {parameters_text(plan.params)}",
        *([head + mix] if mix else []),
        f"steps: {plan.steps:,} ({plan.steps_from})"
        + (f", {pct}% interval {plan.steps_low:,}–{plan.steps_high:,}" if plan.steps_from == "forecast" else ""),
        f"peak training memory: {m.total_bytes / GIB:.2f} GiB",
        f"  (weights {m.weights_bytes / GIB:.2f}, gradients {m.gradients_bytes / GIB:.2f}, optimizer {m.optimizer_bytes / GIB:.2f}, "
        f"saved activations {m.activations_bytes / GIB:.2f})",
        "",
        f"{'hardware':<22} {'step':>7}  {'wall time [' + str(pct) + '%]':<19} {'cost USD [' + str(pct) + '%]':<19} {'memory':<7}",
    ]
    for r in rows:
        wall = f"{format_duration(r.wall_seconds)} [{format_duration(r.wall_low)}–{format_duration(r.wall_high)}]"
        cost = f"{format_usd(r.cost_usd)} [{format_usd(r.cost_low)}–{format_usd(r.cost_high)}]" if r.cost_usd is not None else "- (no price)"
        fit = "?" if r.fits is None else ("fits" if r.fits and r.fits_upper else ("tight" if r.fits else "NO"))
        lines.append(f"{r.hardware[:22]:<22} {format_step(r.step_seconds):>7}  {wall:<19} {cost:<19} {fit:<7}")
    lines += [
        "",
        f"[{pct}%]: interval from the predictors' measured holdout errors (docs/planning.md).",
        "memory: fits; tight = not if under-predicted as much as the worst zoo step;",
        "NO = does not fit (a GPU keeps 1 GiB for CUDA); ? = device memory unknown.",
    ]
    table = "\n".join(line if len(line) <= 80 else line[:79] + "…" for line in lines)
    # notes are sentences (some name a path): wrapped, never cut
    notes = [w for n in plan.notes for w in textwrap.wrap(n, 80, subsequent_indent="  ", break_on_hyphens=False)]
    return "\n".join([table, *notes]) if notes else table
