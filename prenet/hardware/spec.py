"""The hardware description every predictor uses: a spec sheet reduced to what matters for timing."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from prenet.errors import PrenetError


@dataclass(frozen=True)
class HardwareSpec:
    """One device, as its spec sheet (or local detection) describes it.

    Units are in the field names: FLOP/s as TFLOP/s, bandwidth in GB/s (1e9 bytes/s), clock in MHz,
    memory in GB, cache in MB.
    """

    hardware_id: str
    kind: str  # "gpu" or "cpu"
    peak_fp32_tflops: float
    mem_bw_gbps: float
    cores: int
    clock_mhz: float
    mem_gb: float | None = None
    l2_mb: float | None = None
    sms: int | None = None
    peak_tensor_tflops: float | None = None
    source: str = ""
    #: Dense tensor-core (GPU) or measured low-precision GEMM (CPU) peaks, TFLOP/s; None: the device has none.
    peak_tf32_tflops: float | None = None
    peak_fp16_tflops: float | None = None
    peak_bf16_tflops: float | None = None
    #: Board power (W): a GPU whose peak needs more power than it may draw (T4, L4) sustains less than its peak.
    tdp_w: float | None = None
    #: CPU only: measured bandwidth (GB/s) of a copy that stays in the last-level cache — the op roofline's bandwidth on a
    #: CPU, where a working set of a few MB (an RNN's weights, a layer's activations) never reaches DRAM.
    cache_bw_gbps: float | None = None
    #: CPU only: measured bandwidth (GB/s) of a streaming in-place add whose operands stay in one core's L2
    #: (:func:`prenet.hardware.local.measure_l2_bandwidth_gbps`): on a CPU whose last-level cache is a slow shared mesh
    #: (an Intel Xeon of the Sapphire Rapids kind: 2 MB of L2 per core at ~150 GB/s, the L3 at ~30) an optimizer's
    #: update of a small layer runs 5× faster than the last-level cache allows. None: unknown (the roofline then takes
    #: ``cache_bw_gbps``).
    l2_bw_gbps: float | None = None
    #: CPU only: how many MB a working set may span and still come from the caches (:func:`prenet.hardware.local.
    #: measure_cache_mb`, measured: a shared host leaves a core far less than its L3); a step whose data is larger
    #: fetches its operands from DRAM (:func:`prenet.steptime.step.dram_refetch_ms`). None: unknown.
    cache_mb: float | None = None
    #: GPU only: the base clock (MHz), the clock the vendor guarantees within ``tdp_w`` under a heavy load; ``clock_mhz``
    #: is the boost clock. None: unknown.
    base_clock_mhz: float | None = None
    #: GPU only: the architecture (``Ampere``, ``Ada Lovelace``, …) as TechPowerUp names it; with the FP32 lanes per SM it
    #: says which boards share one chip design, and so one power per lane and clock. None: unknown.
    architecture: str | None = None
    #: GPU only: the clock (MHz) the board sustains on dense math within its power (:mod:`prenet.hardware.power`), and
    #: why; None: the boost clock (``clock_mhz``).
    sustained_clock_mhz: float | None = None
    power_reference: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def peak_flops(self) -> float:
        """Peak FP32 throughput in FLOP/s."""
        return self.peak_fp32_tflops * 1e12

    @property
    def mem_bw_bytes_per_s(self) -> float:
        """Memory bandwidth in bytes/s."""
        return self.mem_bw_gbps * 1e9

    @property
    def compute_clock_share(self) -> float:
        """Share of the spec-sheet compute peaks (all at the boost clock) the board sustains on dense math: 1 unless
        its power limits it (:mod:`prenet.hardware.power`)."""
        if self.sustained_clock_mhz is None or not self.clock_mhz:
            return 1.0
        return min(1.0, self.sustained_clock_mhz / self.clock_mhz)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def peak_tflops(self, unit: str) -> float | None:
        """Peak TFLOP/s of arithmetic unit ``unit`` (fp32 | tf32 | fp16 | bf16); None where the spec sheet has no such
        unit (e.g. bf16 on a V100, tf32 on a CPU)."""
        return {"fp32": self.peak_fp32_tflops, "tf32": self.peak_tf32_tflops, "fp16": self.peak_fp16_tflops, "bf16": self.peak_bf16_tflops}[unit]

    def autocast_precisions(self) -> tuple[str, ...]:
        """The 16-bit autocast precisions (:data:`~prenet.names.AUTOCAST_PRECISIONS`) whose unit its spec sheet has."""
        from prenet.names import AUTOCAST_PRECISIONS

        return tuple(p for p in AUTOCAST_PRECISIONS if self.peak_tflops(p) is not None)

    def features(self) -> dict[str, float]:
        """Hardware features used by the step-time regressors (PreNeT Table 1, hardware part)."""
        return {
            "hw_peak_tflops": float(self.peak_fp32_tflops),
            "hw_mem_bw_gbps": float(self.mem_bw_gbps),
            "hw_cores": float(self.cores),
            "hw_clock_mhz": float(self.clock_mhz),
            "hw_is_gpu": 1.0 if self.kind == "gpu" else 0.0,
        }


_REQUIRED = ("name", "kind", "peak_fp32_tflops", "mem_bw_gbps", "cores", "clock_mhz")
#: The optional number keys of a spec file (each a positive number where given), and the text ones.
_OPTIONAL_NUMBERS = (
    "mem_gb",
    "l2_mb",
    "sms",
    "peak_tensor_tflops",
    "peak_tf32_tflops",
    "peak_fp16_tflops",
    "peak_bf16_tflops",
    "tdp_w",
    "base_clock_mhz",
)
_OPTIONAL_TEXT = ("architecture",)
#: Optional interconnect keys of a GPU spec file, kept in ``extra`` for :func:`prenet.parallel.interconnect.interconnect_of`
#: (numbers positive; ``p2p`` and ``nvls`` true or false).
_INTERCONNECT_NUMBERS = ("nvlink_gbps", "pcie_gen", "pcie_lanes", "gpus_per_node")
_INTERCONNECT_FLAGS = ("p2p", "nvls")
#: Keys that must be whole numbers.
_INTEGERS = ("cores", "sms", "pcie_gen", "pcie_lanes", "gpus_per_node")


def load_spec_yaml(path: str | Path) -> HardwareSpec:
    """Read a device that is not in the catalog from a YAML file.

    Format (units in the keys)::

        name: My GPU 48GB
        kind: gpu            # gpu | cpu
        peak_fp32_tflops: 40.0
        mem_bw_gbps: 960
        cores: 10752         # CUDA cores, or CPU cores used
        clock_mhz: 1800
        mem_gb: 48           # optional
        l2_mb: 96            # optional
        sms: 84              # optional: streaming multiprocessors (GPU)
        peak_tf32_tflops: 80     # optional dense tensor-core peaks; absent = the device has no such unit
        peak_fp16_tflops: 160
        peak_bf16_tflops: 160
        tdp_w: 300           # optional: board power (power-limited GPUs sustain less than their peak)
        base_clock_mhz: 1200 # optional: base clock; clock_mhz is the boost clock
        architecture: Ada Lovelace  # optional: with tdp_w, compares the board's power with its catalog siblings'
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError as e:
        raise PrenetError(f"hardware spec file {p} does not exist; pass a catalog name, 'local' or a YAML file") from e
    except yaml.YAMLError as e:
        raise PrenetError(f"hardware spec file {p} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise PrenetError(f"hardware spec file {p} must hold a mapping with keys {', '.join(_REQUIRED)}")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise PrenetError(f"hardware spec file {p} lacks {', '.join(missing)}; required keys: {', '.join(_REQUIRED)}")
    if raw["kind"] not in ("gpu", "cpu"):
        raise PrenetError(f"hardware spec file {p}: kind must be 'gpu' or 'cpu', got {raw['kind']!r}")
    known = (*_REQUIRED, *_OPTIONAL_NUMBERS, *_OPTIONAL_TEXT, *_INTERCONNECT_NUMBERS, *_INTERCONNECT_FLAGS)
    for k in raw:
        if k not in known:
            close = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(known)}"
            raise PrenetError(f"hardware spec file {p}: unknown key {k!r} ({hint}; units are in the key names)")
    for k in _INTERCONNECT_FLAGS:
        if k in raw and not isinstance(raw[k], bool):
            raise PrenetError(f"hardware spec file {p}: {k} must be true or false, got {raw[k]!r}")
    for k in (*_REQUIRED[2:], *_OPTIONAL_NUMBERS, *_INTERCONNECT_NUMBERS):
        v = raw.get(k)
        if v is None and k not in _REQUIRED:
            continue
        # a bool is an int to Python, NaN and inf are floats: none is a spec-sheet number
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            num = re.match(r"\s*([0-9][0-9.]*)\s*[A-Za-z/]+\s*$", v) if isinstance(v, str) else None  # '48GB', '960 GB/s'
            unit = f" (units are in the key: {k}: {num.group(1)})" if num else ""
            raise PrenetError(f"hardware spec file {p}: {k} must be a positive number, got {v!r}{unit}")
        if k in _INTEGERS and v != int(v):
            raise PrenetError(f"hardware spec file {p}: {k} must be a whole number, got {v!r}")
    return HardwareSpec(
        hardware_id=str(raw["name"]),
        kind=raw["kind"],
        peak_fp32_tflops=float(raw["peak_fp32_tflops"]),
        mem_bw_gbps=float(raw["mem_bw_gbps"]),
        cores=int(raw["cores"]),
        clock_mhz=float(raw["clock_mhz"]),
        mem_gb=_opt_float(raw.get("mem_gb")),
        l2_mb=_opt_float(raw.get("l2_mb")),
        sms=None if raw.get("sms") is None else int(raw["sms"]),
        peak_tensor_tflops=_opt_float(raw.get("peak_tensor_tflops")),
        source=f"spec file {p}",
        peak_tf32_tflops=_opt_float(raw.get("peak_tf32_tflops")),
        peak_fp16_tflops=_opt_float(raw.get("peak_fp16_tflops")),
        peak_bf16_tflops=_opt_float(raw.get("peak_bf16_tflops")),
        tdp_w=_opt_float(raw.get("tdp_w")),
        base_clock_mhz=_opt_float(raw.get("base_clock_mhz")),
        architecture=None if raw.get("architecture") is None else str(raw["architecture"]),
        extra={"spec_file": str(p), **{k: raw[k] for k in (*_INTERCONNECT_NUMBERS, *_INTERCONNECT_FLAGS) if k in raw}},
    )


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
