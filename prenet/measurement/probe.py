"""How fast this host runs right now: a fixed CPU workload, timed every few seconds while a stage measures, so that
timings taken minutes apart on a shared host (steal time, noisy neighbours) are put on one scale.

On a 2-core shared VM the same op timing moves by up to 1.5× within minutes (measured 2026-12-03: every op of one
``benchmark_ops`` run 1.2-1.9× slower than the run an hour earlier, while the whole zoo steps of the same run,
timed two minutes before, were not). Each timed row carries the probe time closest before it (``probe_ms``);
:func:`at_reference_speed` rescales a table to another's host speed by the ratio of their fastest probes
(:func:`speed_ratio`). One factor per table: a single probe sample is too noisy to correct its own row (rescaling
every CPU op by its own probe made the BF16 op holdout 42.7 → 59.0 % MAPE and FP32 51.5 → 49.6 %, on one fresh run's
data, 2026-12-03).

Why the fastest, at a matched count: every timed row keeps its fastest round (``timer.fastest_round``), so it saw the
host at its fastest; a neighbour only ever slows the probe, so its lower envelope is the host's speed and its median
mixes in the slow minutes. Until 2026-12-07 the factor was the ratio of the tables' median probes, and the zoo's 10
steps carried only 3-4 distinct probe samples: over five fresh runs here the factor read 0.79-1.07 and the CPU FP32
zoo MAPE 12.0-17.0 % (mean 13.0) against 7.4-16.0 % (mean 11.1) as timed. The minimum of 15-20 samples sits lower
than the minimum of 3-4 drawn from the same host (order statistics), so the two tables are compared through the same
number of samples: in those five runs the op benchmark's expected fastest of k samples and the zoo's fastest agreed
within 0.967-1.018: minutes apart, the same host speed.

    probe = SpeedProbe(threads=1)
    p = probe.sample()            # ms of the workload now (re-timed when the last sample is older than every_s)
"""

from __future__ import annotations

import time
from math import comb
from typing import TYPE_CHECKING

import numpy as np

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


def probe_samples(frame: pl.DataFrame) -> np.ndarray:
    """The distinct ``probe_ms`` values of ``frame``'s rows (ms; rows timed after one probe sample share it); empty
    when the table has no probe column or no value in it."""
    if "probe_ms" not in frame.columns:
        return np.empty(0)
    return np.unique(frame.get_column("probe_ms").drop_nulls().to_numpy().astype(float))


def fastest_of(samples: np.ndarray, k: int) -> float:
    """The expected fastest (ms) of ``k`` of ``samples`` drawn without replacement: Σᵢ P(the minimum is the i-th
    smallest) · vᵢ, with P = C(n−1−i, k−1) / C(n, k) over the n sorted samples (i from 0); ``k`` ≥ n gives their
    minimum."""
    v = np.sort(np.asarray(samples, dtype=float))
    n = len(v)
    if n == 0:
        raise ValueError("fastest_of: no probe samples")
    k = max(1, min(int(k), n))
    w = np.array([comb(n - 1 - i, k - 1) for i in range(n)], dtype=float) / comb(n, k)
    return float(w @ v)


#: the fewest distinct probe samples a table needs for its factor (:func:`speed_ratio`): with one, the reference is seen
#: through a single draw, its mean (benchmark_ops' 5 BF16 zoo steps, sharing the ops' 5 s probe, carried one sample:
#: factor 1.10 against the ops' 19 samples, 2026-12-07)
MIN_SAMPLES = 3


def speed_ratio(reference: pl.DataFrame, frame: pl.DataFrame) -> tuple[float, int] | None:
    """(``reference``'s fastest probe ÷ ``frame``'s, the sample count k both were seen through): the factor that puts
    ``frame``'s timings on ``reference``'s host speed, each table's fastest probe taken as the expected fastest of k of
    its distinct samples (:func:`fastest_of`, k the smaller table's count), so a table with more samples does not read
    faster for that alone. None when either table has fewer than ``MIN_SAMPLES`` distinct probe samples: its timings
    are then compared as timed."""
    a, b = probe_samples(reference), probe_samples(frame)
    if min(len(a), len(b)) < MIN_SAMPLES:
        return None
    k = min(len(a), len(b))
    return fastest_of(a, k) / fastest_of(b, k), k


def at_reference_speed(frame: pl.DataFrame, reference: pl.DataFrame | None, column: str = "measured_ms") -> pl.DataFrame:
    """``frame`` with ``column`` (ms) rescaled to ``reference``'s host speed: × :func:`speed_ratio`. A None reference,
    or a table without probes, is left as it is."""
    import polars as pl

    r = None if reference is None else speed_ratio(reference, frame)
    if r is None:
        return frame
    return frame.with_columns((pl.col(column) * r[0]).alias(column))
