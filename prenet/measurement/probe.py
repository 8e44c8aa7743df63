"""How fast this host runs right now: a fixed CPU workload, timed every few seconds while a stage measures, so that
timings taken minutes apart on a shared host (steal time, noisy neighbours) are put on one scale.

On a 2-core shared VM the same op timing moves by up to 1.5× within minutes (measured 2026-12-03: every op of one
``benchmark_ops`` run 1.2-1.9× slower than the run an hour earlier, while the whole zoo steps of the same run,
timed two minutes before, were not). Each timed row carries the probe time closest before it (``probe_ms``);
:func:`at_reference_speed` rescales a table to another's host speed by the ratio of their median probes. One factor
per table: a single probe sample is too noisy to correct its own row (rescaling every CPU op by its own probe made
the BF16 op holdout 42.7 → 59.0 % MAPE and FP32 51.5 → 49.6 %, on one fresh run's data, 2026-12-03).

    probe = SpeedProbe(threads=1)
    p = probe.sample()            # ms of the workload now (re-timed when the last sample is older than every_s)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prenet.measurement.timer import time_callable

if TYPE_CHECKING:
    import polars as pl

#: the workload: a compute-bound GEMM and a cache-resident elementwise pass, the two regimes of the op benchmark
GEMM_N = 256
ADD_NUMEL = 1 << 20


def probe_ms(threads: int) -> float:
    """Median time (ms) of the fixed workload: one ``GEMM_N``³ FP32 GEMM plus one in-place add over ``ADD_NUMEL``
    floats, on ``threads`` threads (the stage's own setting)."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(GEMM_N, GEMM_N, generator=g), torch.randn(GEMM_N, GEMM_N, generator=g)
        x = torch.zeros(ADD_NUMEL)

        def work() -> None:
            torch.mm(a, b)
            x.add_(1.0)

        return time_callable(work, warmup=2, repeats=5, min_block_ms=2.0).median_ms
    finally:
        torch.set_num_threads(prev)


class SpeedProbe:
    """Samples :func:`probe_ms` at most every ``every_s`` seconds; ``samples`` keeps them all (ms)."""

    def __init__(self, threads: int, every_s: float = 5.0) -> None:
        self.threads, self.every_s = threads, every_s
        self.samples: list[float] = []
        self._at = -float("inf")

    def sample(self) -> float:
        """The current probe time (ms): re-timed when the last sample is older than ``every_s``."""
        if time.monotonic() - self._at >= self.every_s:
            self.samples.append(probe_ms(self.threads))
            self._at = time.monotonic()
        return self.samples[-1]

    def summary(self) -> dict[str, float | int]:
        """Median, min and max of the samples (ms) and their count, for a stage's record."""
        s = sorted(self.samples)
        return {
            "median_ms": s[len(s) // 2] if s else float("nan"),
            "min_ms": s[0] if s else float("nan"),
            "max_ms": s[-1] if s else float("nan"),
            "samples": len(s),
        }


def reference_probe_ms(frame: pl.DataFrame) -> float | None:
    """The median ``probe_ms`` of ``frame``'s rows (None when no row has one)."""
    if "probe_ms" not in frame.columns:
        return None
    m = frame.get_column("probe_ms").drop_nulls().median()
    return None if m is None else float(m)


def at_reference_speed(frame: pl.DataFrame, reference_ms: float | None, column: str = "measured_ms") -> pl.DataFrame:
    """``frame`` with ``column`` (ms) rescaled to the host speed of ``reference_ms``: × reference / the median probe of
    ``frame`` (:func:`reference_probe_ms`). A None reference, or a frame without probes, is left as it is."""
    import polars as pl

    own = reference_probe_ms(frame)
    if reference_ms is None or own is None or own <= 0:
        return frame
    return frame.with_columns((pl.col(column) * (reference_ms / own)).alias(column))
