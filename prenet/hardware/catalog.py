"""The hardware catalog: vendored GPU spec tables → :class:`HardwareSpec`, looked up by name.

Sources: ``data/hardware/gpu_specs.csv`` (one row per GPU, with provenance) and, for the four GPUs of
Justus et al. 2018 that table lacks, ``data/external/justus2018/justus_gpu_specs.csv``; every GPU's base clock and
architecture from ``data/hardware/gpu_clocks.csv`` (TechPowerUp's GPU database).
Names match case-insensitively, ignoring spaces, dashes and underscores, and through :data:`ALIASES`
(the device strings the external datasets use).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import polars as pl

from prenet.errors import UnknownHardwareError
from prenet.hardware.power import with_sustained_clock
from prenet.hardware.spec import HardwareSpec
from prenet.paths import data_dir

#: Device strings used by the vendored datasets (and common short names) → catalog names.
ALIASES: dict[str, str] = {
    # NeuSight 2025 `Device` column
    "Tesla V100-PCIE-32GB": "V100 PCIe 16/32GB",
    "NVIDIA A100-PCIE-40GB": "A100 40GB PCIe",
    "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
    "Tesla P100-PCIE-16GB": "Tesla P100 PCIe 16GB",
    # NeuSight 2025 test set (`Device` column of scripts/asplos/data/dataset/test/*.csv)
    "NVIDIA L4": "L4",
    "NVIDIA H100 80GB HBM3": "H100 SXM5 80GB",
    # Justus 2018 `gpu_name` column (its V100 had NVLink, io 300 GB/s: an SXM2 board)
    "V100": "V100 SXM2",
    "P100": "Tesla P100 PCIe 16GB",
    "GTX1080Ti": "GTX 1080 Ti",
    "M60": "Tesla M60 (half board)",
    "K40": "Tesla K40",
    "K80": "Tesla K80 (half board)",
    # pytorch-gpu-benchmark (ryujaehun) `gpu` column
    "GeForce GTX 1080 Ti": "GTX 1080 Ti",
    "GeForce RTX 2080 Ti": "RTX 2080 Ti",
    "A100-SXM4-40GB": "A100 40GB SXM4",
    # short names
    "P4": "Tesla P4",
    "T4": "Tesla T4",
    "H100": "H100 SXM5 80GB",
    "H200": "H200 SXM 141GB",
    "A100": "A100 80GB SXM4",
    "V100 PCIe": "V100 PCIe 16/32GB",
    "V100 PCIe 16GB": "V100 PCIe 16/32GB",
    "V100 PCIe 32GB": "V100 PCIe 16/32GB",
}

_JUSTUS_NAMES = {"GTX1080Ti": "GTX 1080 Ti", "M60": "Tesla M60 (half board)", "K40": "Tesla K40", "K80": "Tesla K80 (half board)"}
_JUSTUS_MEM_GB = {"GTX1080Ti": 11.0, "M60": 8.0, "K40": 12.0, "K80": 12.0}
#: SMs and L2 (MB) of the Justus-only GPUs (one die of the dual boards), from NVIDIA's Kepler/Maxwell/Pascal
#: whitepapers as commonly cited; not in justus_gpu_specs.csv. Used only by the op-level efficiency features.
_JUSTUS_SMS_L2 = {"GTX1080Ti": (28, 2.75), "M60": (16, 2.0), "K40": (15, 1.5), "K80": (13, 1.5)}
#: Board power (W) of the Justus-only GPUs, per die of the dual boards (K80 300 W, M60 300 W boards), as commonly cited.
_JUSTUS_TDP_W = {"GTX1080Ti": 250.0, "M60": 150.0, "K40": 235.0, "K80": 150.0}


#: justus_gpu_specs.csv's ``peak_gflops_fp32`` disagrees with its own ``cores`` and ``clock_mhz`` for the M60 (7365 vs
#: 2048 × 2 × 1178 MHz = 4825 GFLOP/s per die), the K80 (5591, the whole board at base clock, vs 4368 per die) and the
#: K40 and 1080 Ti (base-clock figures beside a boost clock). prenet uses 2 × cores × boost clock for all four, the
#: rule the V100 row and NVIDIA's spec sheets follow.
_JUSTUS_PEAK_NOTE = "peak FP32 = 2 × cores × boost clock"


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


def _first_number(v: object) -> float | None:
    if v is None:
        return None
    m = re.search(r"\d+(\.\d+)?", str(v))
    return float(m.group()) if m else None


@lru_cache(maxsize=4)
def _load(root: str) -> dict[str, HardwareSpec]:
    base = Path(root)
    specs: dict[str, HardwareSpec] = {}
    gpus = pl.read_csv(base / "hardware" / "gpu_specs.csv", infer_schema_length=0)  # all as strings
    for r in gpus.iter_rows(named=True):
        peak = _first_number(r["fp32_tflops"])
        bw = _first_number(r["mem_bw_gbs"])
        if peak is None or bw is None:  # e.g. A10G: unverified, no peak → not usable for prediction
            continue
        specs[r["gpu"]] = HardwareSpec(
            hardware_id=r["gpu"],
            kind="gpu",
            peak_fp32_tflops=peak,
            mem_bw_gbps=bw,
            cores=int(_first_number(r["fp32_cores"]) or 0),
            clock_mhz=_first_number(r["boost_mhz"]) or 0.0,
            mem_gb=_first_number(r["mem_gb"]),
            l2_mb=_first_number(r["l2_mb"]),
            sms=int(_first_number(r["sms"]) or 0) or None,
            peak_tensor_tflops=_first_number(r["bf16_tensor_dense_tflops"]) or _first_number(r["fp16_tensor_dense_tflops_fp32acc"]),
            source=f"gpu_specs.csv ({r['verification']})",
            peak_tf32_tflops=_first_number(r["tf32_tensor_dense_tflops"]),
            peak_fp16_tflops=_first_number(r["fp16_tensor_dense_tflops_fp32acc"]),
            peak_bf16_tflops=_first_number(r["bf16_tensor_dense_tflops"]),
            tdp_w=_first_number(r["tdp_w"]),
        )
    clocks = {r["gpu"]: r for r in pl.read_csv(base / "hardware" / "gpu_clocks.csv").iter_rows(named=True)}
    justus = pl.read_csv(base / "external" / "justus2018" / "justus_gpu_specs.csv")
    for r in justus.iter_rows(named=True):
        name = _JUSTUS_NAMES.get(r["gpu_name"])
        if name is None:
            continue
        specs[name] = HardwareSpec(
            hardware_id=name,
            kind="gpu",
            peak_fp32_tflops=2.0 * int(r["cores"]) * float(r["clock_mhz"]) / 1e6,  # see _JUSTUS_PEAK_NOTE
            mem_bw_gbps=float(r["mem_bw_gbs"]),
            cores=int(r["cores"]),
            clock_mhz=float(r["clock_mhz"]),
            mem_gb=_JUSTUS_MEM_GB.get(r["gpu_name"]),
            sms=_JUSTUS_SMS_L2[r["gpu_name"]][0],
            l2_mb=_JUSTUS_SMS_L2[r["gpu_name"]][1],
            tdp_w=_JUSTUS_TDP_W[r["gpu_name"]],
            source=f"justus_gpu_specs.csv (Justus et al. 2018; {_JUSTUS_PEAK_NOTE})",
        )
    for name, spec in specs.items():
        c = clocks.get(name)
        if c is not None:
            specs[name] = replace(spec, base_clock_mhz=float(c["base_mhz"]), architecture=str(c["architecture"]))
    fleet = list(specs.values())
    return {name: with_sustained_clock(spec, fleet) for name, spec in specs.items()}


def catalog() -> dict[str, HardwareSpec]:
    """All catalog entries, keyed by their canonical name."""
    return dict(_load(str(data_dir())))


def resolve_name(name: str) -> str:
    """Canonical catalog name for ``name`` (case-insensitive, aliases allowed).

    Raises :class:`UnknownHardwareError` listing the closest matches when nothing fits.
    """
    specs = _load(str(data_dir()))
    by_norm = {_norm(k): k for k in specs}
    by_norm.update({_norm(a): t for a, t in ALIASES.items() if t in specs})
    key = _norm(name)
    if key in by_norm:
        return by_norm[key]
    close = difflib.get_close_matches(key, list(by_norm), n=3, cutoff=0.4)
    suggestions = sorted({by_norm[c] for c in close})
    hint = f" Closest matches: {', '.join(suggestions)}." if suggestions else ""
    raise UnknownHardwareError(
        f"unknown hardware {name!r}.{hint} Run `prenet hardware list` for every name, "
        "use 'local' for this machine, or describe the device in a YAML spec file (docs/hardware.md)."
    )


def alias_note(name: str) -> str | None:
    """A one-line note when ``name`` reached its catalog entry through an alias or a short name while other catalog
    entries share that name (``h100`` → ``H100 SXM5 80GB`` while an H100 PCIe exists): say which was chosen."""
    if name == "local" or name.endswith((".yaml", ".yml")):
        return None
    chosen = resolve_name(name)
    key = _norm(name)
    if key == _norm(chosen):
        return None
    others = sorted(k for k in _load(str(data_dir())) if k != chosen and key in _norm(k))
    if not others:
        return None
    return f"{name!r} means {chosen}; other variants: {', '.join(others)} (name one to choose it)"


def get(name: str) -> HardwareSpec:
    """Catalog entry by name (see :func:`resolve_name`)."""
    return _load(str(data_dir()))[resolve_name(name)]
