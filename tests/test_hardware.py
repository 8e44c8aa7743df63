"""Hardware catalog lookups, YAML spec files and local detection."""

import re

import pytest

from prenet.errors import PrenetError, UnknownHardwareError
from prenet.hardware import catalog, get, load_spec_yaml, resolve, resolve_name
from prenet.hardware.local import cpu_peak_tflops, detect_cpu, simd_width_bits


@pytest.mark.parametrize(
    "name,expected",
    [
        ("H100 SXM5 80GB", "H100 SXM5 80GB"),
        ("h100 sxm5 80gb", "H100 SXM5 80GB"),
        ("L4", "L4"),
        ("l4", "L4"),
        ("V100 PCIe 16/32GB", "V100 PCIe 16/32GB"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe 16/32GB"),
        ("K80", "Tesla K80 (half board)"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ],
)
def test_names_match_case_insensitively_and_through_aliases(name, expected):
    assert resolve_name(name) == expected


def test_unknown_name_lists_closest_matches():
    with pytest.raises(UnknownHardwareError) as e:
        get("H100 SXM")
    assert "H100 SXM5 80GB" in str(e.value)
    assert "prenet hardware list" in str(e.value)


def test_catalog_rows_carry_the_spec_sheet_values():
    h100 = get("H100 SXM5 80GB")
    assert h100.peak_fp32_tflops == pytest.approx(66.9)
    assert h100.mem_bw_gbps == pytest.approx(3350)
    assert h100.kind == "gpu" and h100.sms == 132
    assert all(s.peak_fp32_tflops > 0 and s.mem_bw_gbps > 0 for s in catalog().values())
    # every GPU of the vendored datasets resolves
    for n in ("V100", "P100", "GTX1080Ti", "M60", "K40", "K80", "Tesla P4", "Tesla T4", "NVIDIA A100 80GB PCIe", "Tesla P100-PCIE-16GB"):
        resolve_name(n)


def test_every_catalog_gpu_has_its_base_clock_below_its_boost_and_an_architecture():
    gpus = [s for s in catalog().values() if s.kind == "gpu"]
    assert gpus and all(s.architecture and s.base_clock_mhz and 0 < s.base_clock_mhz < s.clock_mhz for s in gpus)
    t4 = get("T4")
    assert (t4.base_clock_mhz, t4.clock_mhz, t4.tdp_w, t4.architecture) == (585, 1590, 70, "Turing")


def test_yaml_spec_file(tmp_path):
    p = tmp_path / "mygpu.yaml"
    p.write_text("name: My GPU\nkind: gpu\npeak_fp32_tflops: 40\nmem_bw_gbps: 960\ncores: 10752\nclock_mhz: 1800\nmem_gb: 48\n")
    s = resolve(str(p))
    assert s.hardware_id == "My GPU" and s.peak_flops == 40e12 and s.mem_gb == 48
    assert s.base_clock_mhz is None and s.architecture is None
    p.write_text(p.read_text() + "base_clock_mhz: 900\narchitecture: Ada Lovelace\n")
    s = resolve(str(p))
    assert (s.base_clock_mhz, s.architecture) == (900.0, "Ada Lovelace")


def test_yaml_spec_file_errors_name_the_problem(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: X\nkind: gpu\npeak_fp32_tflops: -1\nmem_bw_gbps: 1\ncores: 1\nclock_mhz: 1\n")
    with pytest.raises(PrenetError, match="peak_fp32_tflops must be a positive number"):
        load_spec_yaml(p)
    p.write_text("name: X\n")
    with pytest.raises(PrenetError, match="lacks kind"):
        load_spec_yaml(p)
    # every number, optional ones too, is checked: a new user's spec file crashed with a traceback or answered from
    # a negative or NaN peak (2026-12-07)
    good = "name: X\nkind: gpu\npeak_fp32_tflops: 91\nmem_bw_gbps: 960\ncores: 18176\nclock_mhz: 2505\n"
    for extra, says in (
        ("l2_mb: -5", "l2_mb must be a positive number, got -5"),
        ("mem_gb: 48GB", "mem_gb must be a positive number, got '48GB' (units are in the key: mem_gb: 48)"),
        ("sms: many", "sms must be a positive number, got 'many'"),
        ("peak_bf16_tflops: -364", "peak_bf16_tflops must be a positive number"),
        ("tdp_w: .nan", "tdp_w must be a positive number, got nan"),
        ("sms: true", "sms must be a positive number, got True"),
        ("sms: 142.5", "sms must be a whole number"),
        ("peak_bf16_tflop: 364", "unknown key 'peak_bf16_tflop' (did you mean 'peak_bf16_tflops'?"),
    ):
        p.write_text(good + extra + "\n")
        with pytest.raises(PrenetError, match=re.escape(says)):
            load_spec_yaml(p)
    p.write_text(good + "sms: 142\npeak_bf16_tflops: 364\n")
    assert load_spec_yaml(p).sms == 142 and load_spec_yaml(p).peak_bf16_tflops == 364.0
    # the interconnect keys prenet.parallel reads from a spec's extra: accepted and checked (load_spec_yaml dropped them)
    from prenet.parallel.interconnect import interconnect

    p.write_text(good + "nvlink_gbps: 450\ngpus_per_node: 4\np2p: true\n")
    link = interconnect(load_spec_yaml(p))
    assert (link.nvlink_gbps, link.gpus_per_node, link.p2p) == (450.0, 4, True)
    p.write_text(good + "p2p: yes please\n")
    with pytest.raises(PrenetError, match="p2p must be true or false"):
        load_spec_yaml(p)
    # a spec file without a BF16 peak: the refusal says which key would give one
    import polars as pl

    from prenet.steptime.efficiency import UnsupportedPrecisionError, peaks

    p.write_text(good)
    with pytest.raises(UnsupportedPrecisionError, match=re.escape(f"or give peak_bf16_tflops in {p}, the dense tensor-core peak")):
        peaks(pl.DataFrame({"unit": ["bf16"]}), load_spec_yaml(p))


def test_peak_formula_and_simd():
    assert simd_width_bits({"avx512f", "avx2"}) == 512
    assert simd_width_bits({"avx2"}) == 256
    assert simd_width_bits(set()) == 128
    # 1 thread × 2 GHz × 16 lanes × 2 FMA units × 2 FLOPs = 128 GFLOP/s
    assert cpu_peak_tflops(1, 2000, 512, 2) == pytest.approx(0.128)


@pytest.mark.slow  # 20 s to 6 min on 2 cores: `make test-slow` runs it (CI too)
def test_local_cpu_detection_measures_bandwidth():
    s = detect_cpu(threads=1, bandwidth_mb=32)
    assert s.kind == "cpu" and s.cores == 1 and s.peak_fp32_tflops > 0
    assert s.mem_bw_gbps > 0.5  # measured, not looked up
    assert s.extra["threads"] == 1


def test_bf16_units_from_cpu_flags_and_the_answer_says_how_bf16_runs():
    from prenet.hardware.local import bf16_units
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.step import cpu_bf16_note

    assert bf16_units({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}) == "amx_bf16"
    assert bf16_units({"avx512f", "avx512_bf16"}) == "avx512_bf16"
    assert bf16_units({"fp", "asimd", "bf16"}) == "bf16"
    assert bf16_units({"avx2", "fma"}) == "none"

    def cpu(bf16_tflops: float, units: str, simd: int = 512) -> HardwareSpec:
        return HardwareSpec(hardware_id="cpu-x-2c", kind="cpu", peak_fp32_tflops=0.1, mem_bw_gbps=20.0, cores=2, clock_mhz=2000.0,
                            peak_bf16_tflops=bf16_tflops, extra={"bf16_units": units, "simd_bits": simd})  # fmt: skip

    note = cpu_bf16_note(cpu(0.02, "none"))
    assert "no native BF16 units" in note and "oneDNN converts" in note and "0.2×" in note
    avx2 = cpu_bf16_note(cpu(0.01, "none", 256))  # an AMD EPYC (Zen 3): ATen's reference loops, layout-bound
    assert "reference loops" in avx2 and "oneDNN converts" not in avx2 and "0.1×" in avx2
    amx = cpu_bf16_note(cpu(0.5, "amx_bf16"))
    assert "AMX" in amx and "5.0×" in amx


def test_local_hardware_is_measured_once_then_read_back(monkeypatch, tmp_path):
    """`--hardware local` at a thread count the benchmark did not record: measured on the first answer, stored, and
    read back after (the same question no longer moves with the host's load); with the store off, measured each time."""
    import json
    import os

    from prenet.hardware import local as local_mod
    from prenet.hardware import resolve
    from prenet.hardware.spec import HardwareSpec

    calls, fake_results = [], []

    def fake(threads: int) -> HardwareSpec:
        calls.append(threads)
        fake_results.append(HardwareSpec(hardware_id=local_mod.cpu_id(), kind="cpu", peak_fp32_tflops=0.05 * len(calls), mem_bw_gbps=20.0,
                            cores=2, clock_mhz=2000.0, extra={"threads": threads}))  # fmt: skip
        return fake_results[-1]

    monkeypatch.setattr(local_mod, "detect_cpu", fake)
    monkeypatch.setenv("PRENET_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PRENET_TRACE_CACHE", "on")
    first = resolve("local", threads=2, local_record=tmp_path / "no-record.json")
    again = resolve("local", threads=2, local_record=tmp_path / "no-record.json")
    assert calls == [2] and again.peak_fp32_tflops == first.peak_fp32_tflops == 0.05
    assert again.extra["measured_at"] == first.extra["measured_at"] and again.extra["measured_at"].endswith("UTC")
    assert len(list((tmp_path / "hardware").glob("*t-v*.json"))) == 1 and "measured_at" not in fake_results[0].extra  # not in place
    monkeypatch.setenv("PRENET_TRACE_CACHE", "off")
    assert resolve("local", threads=2, local_record=None).peak_fp32_tflops == 0.1 and calls == [2, 2]  # store off: measured
    # the benchmark's record of this CPU at that thread count wins, and the store is not touched
    monkeypatch.setenv("PRENET_TRACE_CACHE", "on")
    used = max(1, min(2, os.cpu_count() or 1))
    record = tmp_path / "hardware.json"
    record.write_text(json.dumps({**first.to_dict(), "peak_fp32_tflops": 7.0, "extra": {"threads": used}}))
    assert resolve("local", threads=2, local_record=record).peak_fp32_tflops == 7.0 and calls == [2, 2]
