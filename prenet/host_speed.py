"""How fast this CPU runs now against when its op benchmark timed it: the factor a local CPU answer is scaled by.

The op models of this host's CPU answer at the speed the host had while ``benchmark_ops`` timed its ops. A shared VM
does not keep it: the same host ran 1.17-1.19× slower hours later (2026-12-08), and the unseen-model check
(``scripts/check_unseen_cpu.py``) read 25.7 % FP32 MAPE as timed, 12.9 % with its steps put on the benchmark's speed.
So an answer for this very CPU takes :data:`SAMPLES` probes of :func:`prenet.measurement.probe.probe_ms` now (about
20 ms each, :data:`GAP_S` apart, once per process) and compares their fastest with the expected fastest of as many of the op benchmark's
own samples (:func:`~prenet.measurement.probe.fastest_of`, stored by ``train_ops`` in the CPU models' manifest). A
ratio within :data:`DEAD_BAND` of 1 is read as the same speed and the answer stays as fitted; else every op's time,
the host's cost per module call, the measured null step and the cache refetches are multiplied by it, and the
answer says so (:meth:`prenet.steptime.efficiency.EfficiencyModel.at_host_speed`).

``PRENET_HOST_SPEED=recorded`` (or the CLI's ``--host-speed recorded``) answers at the recorded speed instead; the
pipeline's evaluations always do, as they put their measured steps on that speed themselves (``evaluate_ops``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from prenet.errors import PrenetError

#: probe samples taken now (~20 ms each), ``GAP_S`` apart: a neighbour's burst of a tenth of a second slowed 3
#: back-to-back samples alike and read 1.72× where the next four answers read 1.16-1.21× (2026-12-08)
SAMPLES = 5
GAP_S = 0.05
#: a measured ratio within ±this of 1 is read as the recorded speed: the probes of one process scatter by ~5 %, and a
#: check whose steps ran at the recorded speed (rescaled factor 0.993) read 1.08× at its end, which scaled its 7.4 %
#: MAPE to 8.4 % (2026-12-08); the slow hours read 1.17-1.38×
DEAD_BAND = 0.10
#: the environment variable that picks the mode (default ``now``)
ENV = "PRENET_HOST_SPEED"
MODES = ("now", "recorded")


def host_speed_mode(requested: str | None = None) -> str:
    """``requested``, else ``$PRENET_HOST_SPEED``, else ``now``; one of :data:`MODES` (else a one-line error)."""
    mode = (requested or os.environ.get(ENV) or "now").strip().lower()
    if mode not in MODES:
        where = "host_speed" if requested else ENV
        raise PrenetError(f"{where}={mode!r} is not a host-speed mode; choose one of: {', '.join(MODES)}")
    return mode


@dataclass(frozen=True)
class HostSpeed:
    """This CPU's speed now against its op benchmark's: ``factor`` multiplies the recorded answer (> 1: slower now;
    exactly 1 inside the dead band); ``measured`` is the probes' ratio itself; ``now_ms`` / ``then_ms`` the fastest
    probe (ms) now and the expected fastest of as many samples then."""

    factor: float
    measured: float
    now_ms: float
    then_ms: float
    samples: int

    def note(self) -> str:
        """The answer's line about it."""
        probes = f"speed probe {self.now_ms:.3f} ms now, {self.then_ms:.3f} ms then, fastest of {self.samples}"
        if self.factor == 1.0:
            return f"host speed: this CPU runs at the speed its op benchmark had ({probes}: within ±{100 * DEAD_BAND:.0f} %); answered as fitted"
        how = "slower" if self.factor > 1 else "faster"
        return (
            f"host speed: this CPU runs {max(self.factor, 1 / self.factor):.2f}× {how} now than while its op benchmark "
            f"timed its ops ({probes}); every op's time is scaled by {self.factor:.2f} (--host-speed recorded: as fitted). "
            "Memory-bound steps can slow more than the probe reads"
        )


@lru_cache(maxsize=4)
def probes_now(threads: int) -> tuple[float, ...]:
    """:data:`SAMPLES` probe times (ms) on ``threads`` threads, :data:`GAP_S` apart, taken once per process: every
    answer of one process (a layer table and a step) sees one host speed."""
    import time

    from prenet.measurement.probe import probe_ms

    out = []
    for i in range(SAMPLES):
        if i:
            time.sleep(GAP_S)
        out.append(probe_ms(threads))
    return tuple(out)


def host_speed(reference_ms: list[float], threads: int) -> HostSpeed | None:
    """The :class:`HostSpeed` of this CPU against ``reference_ms`` (the op benchmark's distinct probe samples, taken on
    ``threads`` threads); None without at least :data:`SAMPLES` of them."""
    import numpy as np

    from prenet.measurement.probe import fastest_of

    if len(reference_ms) < SAMPLES:
        return None
    now = probes_now(int(threads))
    k = min(len(now), len(reference_ms))
    now_ms, then_ms = fastest_of(np.array(now), k), fastest_of(np.array(reference_ms), k)
    measured = now_ms / then_ms
    factor = 1.0 if abs(measured - 1.0) <= DEAD_BAND else measured
    return HostSpeed(factor=factor, measured=measured, now_ms=now_ms, then_ms=then_ms, samples=k)
