"""The planner's intervals: measured error ratios (measured / predicted) and the one rule that turns them into
bounds, the central ``coverage`` share (:func:`central`). The evaluation stages write typed records
(:class:`StepTimeErrors`, :class:`StepsErrors` of :class:`RatioSet`) with :func:`write_errors`; ``prenet plan`` reads
them back (:func:`load_intervals`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from prenet.errors import PrenetError


def central(values: Sequence[float] | np.ndarray, coverage: float) -> tuple[float, float]:
    """(low, high): the ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` quantiles of ``values`` (80 % → 10th and
    90th percentile)."""
    lo, hi = np.quantile(np.asarray(values, float), [(1 - coverage) / 2, (1 + coverage) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class RatioSet:
    """Measured / predicted ratios of one kind of prediction, with the central ``coverage`` bounds they give and
    how often such a bound held a ratio left out (:func:`loo_coverage`)."""

    ratios: tuple[float, ...]
    coverage: float
    loo_coverage: float | None = None

    @classmethod
    def measure(cls, ratios: Sequence[float], coverage: float, *, with_loo: bool = True) -> RatioSet:
        """The ratios (rounded to 4 digits) of one evaluation."""
        r = tuple(round(float(v), 4) for v in ratios)
        return cls(r, float(coverage), loo_coverage(list(r), coverage) if with_loo else None)

    @property
    def bounds(self) -> tuple[float, float]:
        """(low, high) factors: the central ``coverage`` share of the ratios."""
        return central(self.ratios, self.coverage)

    def summary(self) -> dict:
        """n, low, median, high and leave-one-out coverage (for metrics and the report)."""
        lo, hi = self.bounds if self.ratios else (None, None)
        med = float(np.median(self.ratios)) if self.ratios else None
        return {"n": len(self.ratios), "low": lo, "median": med, "high": hi, "loo_coverage": self.loo_coverage}


@dataclass(frozen=True)
class StepTimeErrors:
    """What ``evaluate`` (PreNeT recipe) or ``evaluate_ops`` (op level) measured of step-time predictions: whole zoo
    steps on the local CPU and per-layer/op deciles on GPUs held out of training; the largest measured / predicted
    peak memory of the zoo (``evaluate`` only)."""

    coverage: float
    local_whole_model: RatioSet | None
    unseen_gpu: RatioSet | None
    memory_ratio_max: float | None = None

    def summary(self) -> dict:
        """The bounds of each ratio set, for a stage's record (the ratios themselves stay in the interval record)."""
        out: dict = {"coverage": self.coverage}
        for name in ("local_whole_model", "unseen_gpu"):
            rs = getattr(self, name)
            if rs is not None:
                out[name] = rs.summary()
        return out


#: Bands of a convergence forecast's kernel drift over its horizon (‖Θ_end − Θ_0‖_F/‖Θ_0‖_F): the further fine-tuning
#: moves from its linearization, the wider the forecast's error (measured per band, :attr:`StepsErrors.by_drift`)
DRIFT_EDGES = (0.1, 1.0)


def drift_band(drift: float | None) -> str | None:
    """The :data:`DRIFT_EDGES` band of a forecast's ``drift`` (``<0.1``, ``0.1-1``, ``>=1``); None when not measured."""
    if drift is None or not math.isfinite(drift):
        return None
    lo, hi = DRIFT_EDGES
    return f"<{lo:g}" if drift < lo else (f"{lo:g}-{hi:g}" if drift < hi else f">={hi:g}")


@dataclass(frozen=True)
class StepsErrors:
    """What ``evaluate_convergence`` measured of the forecast steps on holdout fine-tunes: per target key
    (``relative_eps=0.1``, ``loss<=0.1*L0``, ``accuracy>=0.9``…) and forecast variant (``default``: what ``forecast()``
    answers, ``forecast``: the plain static-kernel curve, ``corrected``); and ``by_drift``: the default answer's ratios
    per :func:`drift_band`, every target and configuration pooled (the forecast fits nothing on them)."""

    coverage: float
    targets: dict[str, dict[str, RatioSet]] = field(default_factory=dict)
    by_drift: dict[str, RatioSet] = field(default_factory=dict)

    def summary(self) -> dict:
        """{target: {variant: bounds}} (and the drift bands') for a stage's record."""
        out: dict = {t: {src: rs.summary() for src, rs in per.items()} for t, per in self.targets.items()}
        if self.by_drift:
            out["by_drift"] = {band: rs.summary() for band, rs in self.by_drift.items()}
        return out


#: The interval records and their file names in ``paths.intervals``, in the order the planner prefers them.
RECORD_FILES: dict[str, type] = {"step_time_ops.json": StepTimeErrors, "step_time.json": StepTimeErrors, "steps.json": StepsErrors}
_VERSION = 1


def _encode(obj: object) -> object:
    if isinstance(obj, RatioSet):
        return {"ratios": list(obj.ratios), "coverage": obj.coverage, "loo_coverage": obj.loo_coverage}
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    return obj


def write_errors(record: StepTimeErrors | StepsErrors, path: str | Path) -> Path:
    """Write one interval record as JSON (type name and version first) atomically."""
    from prenet.data.io import write_json

    body = {f.name: _encode(getattr(record, f.name)) for f in fields(record)}
    return write_json({"record": type(record).__name__, "version": _VERSION, **body}, path)


def _ratio_set(d: dict | None, where: str) -> RatioSet | None:
    if d is None:
        return None
    try:
        return RatioSet(tuple(float(v) for v in d["ratios"]), float(d["coverage"]), d.get("loo_coverage"))
    except (KeyError, TypeError, ValueError) as e:
        raise PrenetError(f"{where}: not a ratio set ({e}); rerun the evaluation stage that writes it") from None


def read_errors(path: str | Path, kind: type[StepTimeErrors] | type[StepsErrors]) -> StepTimeErrors | StepsErrors:
    """Read an interval record written by :func:`write_errors`; one-line :class:`PrenetError` when it is missing,
    of another type or version, or malformed."""
    p = Path(path)
    if not p.is_file():
        raise PrenetError(f"{p} does not exist: the intervals come from the pipeline's evaluation stages; run `dvc repro` (or `make run`)")
    d = json.loads(p.read_text())
    if d.get("record") != kind.__name__ or d.get("version") != _VERSION:
        raise PrenetError(f"{p} holds {d.get('record')} v{d.get('version')}, not {kind.__name__} v{_VERSION}; rerun `dvc repro` to rewrite it")
    if kind is StepsErrors:
        targets = {t: {src: _ratio_set(v, f"{p}:{t}/{src}") for src, v in per.items()} for t, per in d.get("targets", {}).items()}
        by_drift = {band: _ratio_set(v, f"{p}:by_drift/{band}") for band, v in d.get("by_drift", {}).items()}
        return StepsErrors(float(d["coverage"]), targets, by_drift)  # type: ignore[arg-type]
    return StepTimeErrors(
        float(d["coverage"]),
        _ratio_set(d.get("local_whole_model"), f"{p}:local_whole_model"),
        _ratio_set(d.get("unseen_gpu"), f"{p}:unseen_gpu"),
        d.get("memory_ratio_max"),
    )


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


def interval_ratios(measured: Sequence[float] | np.ndarray, predicted: Sequence[float] | np.ndarray) -> list[float]:
    """measured / predicted of each prediction, rounded (the empirical error distribution behind intervals)."""
    return [round(float(v), 4) for v in np.asarray(measured, float) / np.asarray(predicted, float)]


#: Fewest ratios of a drift band that may widen a steps interval (:func:`load_intervals`)
MIN_BAND_RATIOS = 10


def load_intervals(
    intervals_dir: str | Path, *, steps_target: str | None = None, steps_source: str = "default", drift: float | None = None
) -> Intervals:
    """The planner's intervals from the typed records the pipeline's evaluation stages wrote in ``intervals_dir``
    (``paths.intervals``): step time and memory from the op-level evaluation (``evaluate_ops``; the PreNeT recipe's
    record only when that is absent, as in an older run); steps to ``steps_target`` (e.g. ``relative_eps=0.1``) of ``steps_source`` from the convergence
    evaluation, or of the closest measured target when that one has none. With the forecast's kernel ``drift``: where
    the forecasts of its drift band (:func:`drift_band`, at least ``MIN_BAND_RATIOS`` ratios) erred more widely than the
    target's holdout forecasts, their ratios bound the steps instead (a fine-tune far from its linearization)."""
    d = Path(intervals_dir)
    ops_path = d / "step_time_ops.json"
    step = read_errors(ops_path if ops_path.is_file() else d / "step_time.json", StepTimeErrors)
    assert isinstance(step, StepTimeErrors)
    steps = None
    if steps_target is not None:
        cv = read_errors(d / "steps.json", StepsErrors)
        assert isinstance(cv, StepsErrors)
        # the target's own kind first, then any other measured kind (the forecast's error on the closest target)
        for key in [steps_target, *sorted(k for k in cv.targets if k != steps_target)]:
            per = cv.targets.get(key, {})
            entry = per.get(steps_source) or per.get("forecast")
            if entry is not None and entry.ratios:
                steps = list(entry.ratios)
                break
        band = cv.by_drift.get(drift_band(drift) or "")
        if steps and band is not None and len(band.ratios) >= MIN_BAND_RATIOS:
            (lo, hi), (blo, bhi) = central(steps, cv.coverage), band.bounds
            if blo < lo or bhi > hi:
                steps = list(band.ratios)
        if not steps:
            raise PrenetError(
                f"{d / 'steps.json'} has no measured forecast errors on holdout configurations; without them the steps have no "
                "interval. Rerun `dvc repro evaluate_convergence` (its holdout needs configurations that reach the targets)"
            )
    return Intervals(
        step_local=list(step.local_whole_model.ratios) if step.local_whole_model else [],
        step_gpu=list(step.unseen_gpu.ratios) if step.unseen_gpu else [],
        steps=steps,
        memory_ratio_max=step.memory_ratio_max,
        coverage=step.coverage,
    )


def steps_interval(steps: int, intervals: Intervals) -> tuple[int, int]:
    """(low, high) steps: the point when given, else the forecast scaled by the measured ratio quantiles."""
    if not intervals.steps:
        return steps, steps
    lo, hi = central(intervals.steps, intervals.coverage)
    return int(math.floor(steps * lo)), int(math.ceil(steps * hi))
