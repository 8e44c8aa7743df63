"""The host-speed probe puts timings taken at different moments on one scale (prenet/measurement/probe.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from prenet.measurement.probe import SpeedProbe, at_reference_speed, fastest_of, probe_ms, speed_ratio


def test_a_table_is_rescaled_to_another_host_speed_by_its_fastest_probe():
    # these steps were timed while the host ran at best twice as slow as the reference's best (2.0 ms vs 1.0 ms)
    f = pl.DataFrame({"measured_ms": [4.0, 8.0, 6.0, 10.0], "probe_ms": [2.0, 3.0, 2.0, 2.5]})  # 3 samples, one shared by two rows
    ref = pl.DataFrame({"measured_ms": [1.0, 1.0, 1.0], "probe_ms": [1.0, 1.4, 1.6]})
    assert speed_ratio(ref, f) == pytest.approx((0.5, 3))
    assert at_reference_speed(f, ref)["measured_ms"].to_list() == pytest.approx([2.0, 4.0, 3.0, 5.0])
    assert at_reference_speed(f, None).equals(f)
    no_probe = f.drop("probe_ms")
    assert speed_ratio(ref, no_probe) is None and at_reference_speed(no_probe, ref).equals(no_probe)
    assert at_reference_speed(f.with_columns(pl.lit(None, dtype=pl.Float64).alias("probe_ms")), ref)["measured_ms"].to_list() == [4.0, 8.0, 6.0, 10.0]


def test_more_probe_samples_do_not_read_as_a_faster_host():
    # one host, one probe distribution: the fastest of 4 of 20 samples
    rng = np.random.default_rng(0)
    many = 0.5 * (1 + rng.exponential(0.15, 20))
    k4 = fastest_of(many, 4)
    assert fastest_of(many, 20) == pytest.approx(many.min()) and fastest_of(many, 1) == pytest.approx(many.mean())
    assert many.min() < k4 < np.sort(many)[5]  # the fastest of 4 of them sits above the fastest of all 20
    # exact order statistics: the mean of the minimum over every 2-subset of 4 values
    v = np.array([1.0, 2.0, 3.0, 4.0])
    assert fastest_of(v, 2) == pytest.approx(np.mean([min(a, b) for i, a in enumerate(v) for b in v[i + 1 :]]))
    # averaged over draws, the matched ratio is near 1 where the raw minima's ratio is biased low
    draws = [rng.exponential(0.15, 20) for _ in range(300)]
    fews = [rng.exponential(0.15, 4) for _ in range(300)]
    matched = np.mean([fastest_of(1 + a, 4) / (1 + b).min() for a, b in zip(draws, fews)])
    raw = np.mean([(1 + a).min() / (1 + b).min() for a, b in zip(draws, fews)])
    assert abs(matched - 1) < 0.01 and raw < 0.98  # ~0.977: the raw minima read the 4-sample table 2 % slow


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


def test_a_table_of_too_few_probe_samples_is_compared_as_timed():
    ref = pl.DataFrame({"measured_ms": [1.0] * 4, "probe_ms": [1.0, 1.1, 1.2, 1.3]})
    one = pl.DataFrame({"measured_ms": [4.0, 8.0], "probe_ms": [2.0, 2.0]})  # two rows, one sample
    assert speed_ratio(ref, one) is None and at_reference_speed(one, ref).equals(one)
