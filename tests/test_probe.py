"""The host-speed probe puts timings taken at different moments on one scale (prenet/measurement/probe.py)."""

from __future__ import annotations

import polars as pl
import pytest

from prenet.measurement.probe import SpeedProbe, at_reference_speed, probe_ms, reference_probe_ms


def test_a_table_is_rescaled_to_another_host_speed_by_its_median_probe():
    # these steps were timed while the host ran twice as slow as the reference (median probe 2.0 ms vs 1.0 ms)
    f = pl.DataFrame({"measured_ms": [4.0, 8.0, 6.0], "probe_ms": [1.9, 2.0, 2.1]})
    assert reference_probe_ms(f) == pytest.approx(2.0)
    assert at_reference_speed(f, 1.0)["measured_ms"].to_list() == pytest.approx([2.0, 4.0, 3.0])
    assert at_reference_speed(f, None).equals(f)
    no_probe = f.drop("probe_ms")
    assert reference_probe_ms(no_probe) is None and at_reference_speed(no_probe, 1.0).equals(no_probe)
    assert at_reference_speed(f.with_columns(pl.lit(None, dtype=pl.Float64).alias("probe_ms")), 1.0)["measured_ms"].to_list() == [4.0, 8.0, 6.0]


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
