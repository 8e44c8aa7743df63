"""Wall-clock timing of a callable: warm-up, a calibrated inner loop, repeats, median and spread."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Per-iteration times in ms over ``repeats`` blocks of ``number`` iterations each.

    ``spread_rel`` = interquartile range / median across the repeats: the run-to-run noise of this
    measurement, the floor under which no predictor's error is meaningful.
    """

    median_ms: float
    min_ms: float
    iqr_ms: float
    spread_rel: float
    repeats: int
    number: int


def time_callable(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    min_block_ms: float = 5.0,
    max_number: int = 1000,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    warmed_ms: float | None = None,
    warmup_ms: float = 0.0,
) -> Timing:
    """Time ``fn``: ``warmup`` calls (at least one; the last one's duration chooses ``number`` so one block lasts
    ≥ ``min_block_ms``), continued until the warm-up has lasted ``warmup_ms`` (ms), then ``repeats`` blocks. ``sync``
    (e.g. ``torch.cuda.synchronize``) runs before each clock read. ``warmed_ms``: the caller has already warmed ``fn``
    up and one call took about this long — no warm-up call is made unless that call was shorter than ``warmup_ms``.

    A time-based warm-up matters for fast calls: the first training steps of a model touch fresh memory (gradient and
    output buffers, page faults) and run slower than the steady state a running job sees, so one warm-up step is not
    enough for a step of a few ms (see also :mod:`prenet.measurement.allocator`)."""
    sync = sync or (lambda: None)
    if warmed_ms is not None and warmed_ms >= warmup_ms:
        once_ms = max(warmed_ms, 1e-6)
    else:
        spent = warmed_ms or 0.0
        calls = 1 if warmed_ms is not None else 0
        while True:
            sync()
            t0 = clock()
            fn()  # the last warm-up call also calibrates the inner loop
            sync()
            once_ms = max((clock() - t0) * 1e3, 1e-6)
            spent += once_ms
            calls += 1
            if calls >= max(warmup, 1) and spent >= warmup_ms:
                break
    number = int(min(max_number, max(1, math.ceil(min_block_ms / once_ms))))
    per_iter = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        for _ in range(number):
            fn()
        sync()
        per_iter.append((clock() - t0) * 1e3 / number)
    arr = np.asarray(per_iter)
    med, spread = round_spread(arr[:, None])
    return Timing(
        median_ms=float(med[0]),
        min_ms=float(arr.min()),
        iqr_ms=float(spread[0] * med[0]),
        spread_rel=float(spread[0]),
        repeats=repeats,
        number=number,
    )


def round_spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The median over repeats (axis 0) of ``values`` (repeats × items, ms) and their spread: interquartile range /
    median (0 where the median is 0) — a timing's ``spread_rel``, over its blocks or over its rounds."""
    med = np.median(values, axis=0)
    iqr = np.subtract(*np.percentile(values, [75, 25], axis=0))
    return med, np.divide(iqr, med, out=np.zeros_like(med, dtype=float), where=med > 0)


def across_rounds(rounds: list[Timing]) -> Timing:
    """One timing of a call measured in several rounds, interleaved with other calls' (a round each, in turn), so that a
    noisy neighbour slowing the shared host for a minute slows one round of every call instead of one call's whole
    measurement. ``median_ms`` is the **fastest round's** median: contention only ever adds time, so the least
    contended round is the best estimate of the host's own speed, the one every table measured this way shares
    (:func:`fastest_round`); ``spread_rel`` is the rounds' interquartile range / median (:func:`round_spread`: the
    round-to-round noise; on this 2-core host, 2026-12-04, a step's rounds minutes apart differed by up to 1.6×, its
    blocks within one round by 6 %). One round is returned as it is."""
    if len(rounds) == 1:
        return rounds[0]
    times = np.asarray([[t.median_ms] for t in rounds])
    med, spread = round_spread(times)
    return Timing(
        median_ms=float(fastest_round(times)[0]),
        min_ms=float(min(t.min_ms for t in rounds)),
        iqr_ms=float(spread[0] * med[0]),
        spread_rel=float(spread[0]),
        repeats=sum(t.repeats for t in rounds),
        number=rounds[0].number,
    )


def fastest_round(values: np.ndarray) -> np.ndarray:
    """The time of each item (columns of ``values``, rounds × items, ms; a 1-D array: one item) over interleaved
    rounds: its fastest round. A round-measured row's host-speed probe is the fastest of its rounds' probes, likewise.
    Measured 2026-12-04 on this host against the median of 3 rounds, over one re-measured op table and zoo each: CPU
    FP32 op holdout 38.5 → 30.5 % MAPE, GEMMs 22.5 → 9.9 %, zoo FP32 steps 12.6 → 10.2 % (the second run also had a
    quieter host)."""
    return np.min(values, axis=0)


@dataclass
class RoundSchedule:
    """Interleaved rounds under a wall-clock budget: iterating yields (round, item index), every item once per round, in
    turn (:func:`across_rounds`); the first ``min_rounds`` rounds always run, a further one only where it would end within ``budget_s`` seconds of the
    first round's start, projected from the mean round so far (None: every round runs). A slower host measures fewer
    rounds, never fewer items: every item keeps a complete measurement, and only the noisy-neighbour protection of the
    extra rounds is given up (2026-12-06, an AMD EPYC 1.7-2x slower than the Intel Xeon the rounds were sized on: the
    op benchmark's 3 rounds took 216 s of ``make run``'s 720). ``measured``: rounds completed so far."""

    items: int
    rounds: int
    min_rounds: int = 1
    budget_s: float | None = None
    measured: int = 0
    clock: Callable[[], float] = time.monotonic  # seconds

    def __iter__(self):
        t0 = self.clock()
        for r in range(self.rounds):
            if r >= max(self.min_rounds, 1) and self.budget_s is not None:
                elapsed = self.clock() - t0
                if elapsed * (r + 1) / r > self.budget_s:
                    return
            for i in range(self.items):
                yield r, i
            self.measured = r + 1

    @classmethod
    def from_config(cls, items: int, node: Any, budget_s: float | None) -> "RoundSchedule":
        """``items`` in the rounds a config group sets (``rounds``, ``min_rounds``; both default 1) under ``budget_s``."""
        return cls(items, int(node.get("rounds", 1)), min_rounds=int(node.get("min_rounds", 1)), budget_s=budget_s)

    @property
    def note(self) -> str | None:
        """Why fewer rounds than configured ran (None where every round ran): :meth:`summary`'s ``rounds_note``."""
        return self.summary().get("rounds_note")  # type: ignore[return-value]

    def __len__(self) -> int:
        """The most (round, item) pairs it yields: every round's (a progress bar's total; a budget may stop it sooner)."""
        return self.items * self.rounds

    def summary(self) -> dict[str, object]:
        """What ran, for a stage's metrics: rounds configured and measured, the budget (s), and a note where the
        budget cut rounds."""
        out: dict[str, object] = {"rounds": self.rounds, "rounds_measured": self.measured, "rounds_budget_s": self.budget_s}
        if self.measured < self.rounds:
            out["rounds_note"] = (
                f"{self.measured} of {self.rounds} rounds measured: a further round would have ended past the {self.budget_s:g} s budget "
                "on this host (each item keeps its fastest measured round)"
            )
        return out
