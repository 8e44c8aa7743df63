"""The planner's intervals: measured error ratios (measured / predicted) and the one rule that turns them into
bounds, the central ``coverage`` share (:func:`central`). The evaluation stages record the ratios with this rule;
``prenet plan`` reads them back (:func:`load_intervals`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prenet.errors import PrenetError


def central(values: Sequence[float] | np.ndarray, coverage: float) -> tuple[float, float]:
    """(low, high): the ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` quantiles of ``values`` (80 % → 10th and
    90th percentile)."""
    lo, hi = np.quantile(np.asarray(values, float), [(1 - coverage) / 2, (1 + coverage) / 2])
    return float(lo), float(hi)


def ratio_summary(ratios: Sequence[float], coverage: float) -> dict:
    """The ratios (rounded) with their central ``coverage`` bounds: the record behind one of the planner's intervals."""
    lo, hi = central(ratios, coverage)
    return {"ratios": [round(float(v), 4) for v in ratios], "low": lo, "high": hi}


@dataclass(frozen=True)
class Intervals:
    """Measured error ratios (measured / predicted) behind the plan's intervals."""

    step_local: list[float]
    step_gpu: list[float]
    steps: list[float] | None  # None: the steps are given, not predicted
    memory_ratio_max: float | None  # largest measured / predicted peak memory of the zoo on the CPU
    coverage: float = 0.8

    def bounds(self, kind: str, *, with_steps: bool = True) -> tuple[float, float]:
        """(low, high) factors on a predicted wall time (``with_steps``) or step time for hardware of ``kind``
        (``cpu`` or ``gpu``)."""
        step = np.asarray(self.step_local if kind == "cpu" else self.step_gpu, float)
        if step.size == 0:
            step = np.asarray(self.step_gpu or self.step_local or [1.0], float)
        total = step if not (self.steps and with_steps) else np.outer(step, np.asarray(self.steps, float)).ravel()
        return central(total, self.coverage)


def loo_coverage(ratios: list[float], coverage: float) -> float | None:
    """Share of the ratios inside the central ``coverage`` interval built from all the others (leave one out): how
    often an interval made from this few measured errors holds a new one. None below 3 ratios."""
    r = np.asarray(ratios, float)
    if r.size < 3:
        return None
    hits = []
    for i in range(r.size):
        lo, hi = central(np.delete(r, i), coverage)
        hits.append(lo <= r[i] <= hi)
    return float(np.mean(hits))


def load_intervals(metrics_dir: str | Path, *, steps_target: str | None = None, steps_source: str = "forecast") -> Intervals:
    """The error ratios recorded by the pipeline's ``evaluate`` (step time, memory) and ``evaluate_convergence``
    (steps to ``steps_target``, e.g. ``relative_eps=0.1``) stages in ``metrics_dir``."""
    mdir = Path(metrics_dir)
    ev_path = mdir / "evaluate.json"
    if not ev_path.is_file():
        raise PrenetError(f"{ev_path} does not exist: the intervals come from the step-time evaluation; run `dvc repro evaluate` (or `make run`)")
    ev = json.loads(ev_path.read_text())
    ops_path = mdir / "evaluate_ops.json"  # the op-level model answers step times: its measured errors bound them
    iv = json.loads(ops_path.read_text()).get("intervals") if ops_path.is_file() else ev.get("intervals")
    if not iv:
        raise PrenetError(f"{ev_path} has no 'intervals' (written by an older prenet); rerun `dvc repro evaluate`")
    steps = None
    if steps_target is not None:
        cv_path = mdir / "convergence.json"
        cv = json.loads(cv_path.read_text()) if cv_path.is_file() else {}
        measured = cv.get("intervals", {})
        # the target's own kind first, then any other measured kind (the forecast's error on the closest target)
        for key in [steps_target, *sorted(k for k in measured if k != steps_target)]:
            per = measured.get(key, {})
            entry = per.get(steps_source) or per.get("forecast") or {}
            if entry.get("ratios"):
                steps = entry["ratios"]
                break
        if not steps:
            raise PrenetError(
                f"{cv_path} has no measured forecast errors on holdout configurations; without them the steps have no "
                "interval. Rerun `dvc repro evaluate_convergence` (its holdout needs configurations that reach the targets)"
            )
    mem = ev.get("whole_model", {}).get("memory", {})
    return Intervals(
        step_local=iv.get("local_whole_model", {}).get("ratios", []),
        step_gpu=iv.get("unseen_gpu", {}).get("ratios", []),
        steps=steps,
        memory_ratio_max=mem.get("ratio_max"),
        coverage=float(iv.get("coverage", 0.8)),
    )


def steps_interval(steps: int, intervals: Intervals) -> tuple[int, int]:
    """(low, high) steps: the point when given, else the forecast scaled by the measured ratio quantiles."""
    if not intervals.steps:
        return steps, steps
    lo, hi = central(intervals.steps, intervals.coverage)
    return int(math.floor(steps * lo)), int(math.ceil(steps * hi))
