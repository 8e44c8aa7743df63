"""The host-speed probe puts timings taken at different moments on one scale (prenet/measurement/probe.py)."""

from __future__ import annotations

import polars as pl
import pytest

from prenet.measurement.probe import SpeedProbe, at_reference_speed, probe_ms, reference_probe_ms


def test_rows_are_rescaled_to_the_reference_host_speed():
    # the second op was timed while the host ran twice as slow (probe 2.0 ms vs 1.0 ms); the GPU row has no probe
    f = pl.DataFrame({"measured_ms": [3.0, 8.0, 5.0], "probe_ms": [1.0, 2.0, None]})
    assert reference_probe_ms(f) == pytest.approx(1.5)
    out = at_reference_speed(f, 1.0)
    assert out["measured_ms"].to_list() == pytest.approx([3.0, 4.0, 5.0])
    assert at_reference_speed(f, None).equals(f)
    assert at_reference_speed(f.drop("probe_ms"), 1.0).equals(f.drop("probe_ms"))
    assert reference_probe_ms(f.drop("probe_ms")) is None


def test_the_probe_is_retimed_only_when_its_sample_is_stale():
    p = SpeedProbe(threads=1, every_s=3600.0)
    first = p.sample()
    assert first > 0 and p.sample() == first and len(p.samples) == 1
    p.every_s = 0.0
    p.sample()
    s = p.summary()
    assert s["samples"] == 2 and s["min_ms"] <= s["median_ms"] <= s["max_ms"]


def test_the_probe_times_real_work():
    assert 0.01 < probe_ms(1) < 1000.0  # a 256³ GEMM and a 4 MB add: well under a second, never free
