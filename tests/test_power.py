"""The clock a power-limited GPU sustains on dense math, from its spec sheet (prenet.hardware.power)."""

from dataclasses import replace

import polars as pl
import pytest

from prenet.hardware import get, resolve
from prenet.hardware.power import lane_power_w, power_note, sustained_clock_mhz
from prenet.steptime.efficiency import EfficiencyModel, peaks


def test_a_board_budgeted_less_power_than_its_siblings_runs_below_boost_by_the_cube_root():
    t4, ref = get("T4"), get("RTX 2080 Ti")  # both Turing, 64 FP32 lanes per SM
    share = (lane_power_w(t4) / lane_power_w(ref)) ** (1 / 3)
    assert t4.sustained_clock_mhz == pytest.approx(t4.clock_mhz * share)
    assert t4.base_clock_mhz < t4.sustained_clock_mhz < t4.clock_mhz
    note = power_note(t4)
    assert note and "70 W" in note and "RTX 2080 Ti" in note


@pytest.mark.parametrize("name", ["H100 SXM5 80GB", "A100 80GB SXM4", "V100 SXM2", "RTX 4090"])
def test_the_best_powered_board_of_its_design_keeps_its_boost_clock(name):
    s = get(name)
    assert s.compute_clock_share == 1.0 and power_note(s) is None


def test_the_clock_never_falls_below_the_base_clock():
    l4 = get("L4")
    starved = replace(l4, tdp_w=5.0, sustained_clock_mhz=None)
    clock, ref = sustained_clock_mhz(starved, [starved, get("RTX 4090")])
    assert ref is not None and clock == l4.base_clock_mhz


def test_compute_peaks_scale_with_the_sustained_clock_and_bandwidth_does_not():
    l4 = get("L4")
    ops = pl.DataFrame({"unit": ["fp32", "fp16"]})
    assert peaks(ops, l4) == pytest.approx([l4.peak_fp32_tflops * 1e12 * l4.compute_clock_share, l4.peak_fp16_tflops * 1e12 * l4.compute_clock_share])
    assert 0.6 < l4.compute_clock_share < 0.9 and l4.mem_bw_gbps == 300


def test_a_yaml_board_is_compared_with_its_catalog_siblings_only_when_its_architecture_is_given(tmp_path):
    p = tmp_path / "laptop.yaml"
    body = "name: RTX 4070 Laptop\nkind: gpu\npeak_fp32_tflops: 15.6\nmem_bw_gbps: 256\ncores: 4608\nclock_mhz: 2175\nsms: 36\ntdp_w: 35\n"
    p.write_text(body)
    bare = resolve(str(p))
    assert bare.compute_clock_share == 1.0  # no architecture: not compared, boost clock, and the answer says so
    assert "not checked for a power limit (its spec gives no architecture)" in power_note(bare)
    p.write_text(body + "architecture: Ada Lovelace\nbase_clock_mhz: 735\n")
    s = resolve(str(p))
    assert s.base_clock_mhz / s.clock_mhz <= s.compute_clock_share < 0.7
    assert "RTX 4090" in power_note(s)


def test_a_board_whose_own_ops_trained_the_model_is_answered_at_the_clocks_they_ran_at():
    model = EfficiencyModel(measured_devices=["Tesla T4"])
    t4, l4 = get("T4"), get("L4")
    assert t4.compute_clock_share < 1 and model.clock_for(t4).compute_clock_share == 1.0
    assert model.clock_for(l4) is l4
    assert "not scaled again" in power_note(t4, measured=True) and "scaled by that share" in power_note(l4)
