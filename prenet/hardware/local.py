"""Detect the local device: the CPU (model, cores, SIMD width → peak FLOP/s, measured memory bandwidth)
or a CUDA device (looked up in the catalog by its name)."""

from __future__ import annotations

import os
import statistics
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from prenet.cpu_identity import cpu_id, cpu_model, cpuinfo
from prenet.errors import PrenetError, UnknownHardwareError
from prenet.hardware.spec import HardwareSpec

if TYPE_CHECKING:
    import torch


def simd_width_bits(flags: set[str]) -> int:
    """Widest FP32 SIMD register the CPU advertises (bits): AVX-512 → 512, AVX/AVX2 → 256, else 128."""
    if "avx512f" in flags:
        return 512
    if "avx2" in flags or "avx" in flags:
        return 256
    return 128


def cpu_flags(info: dict[str, str] | None = None) -> set[str]:
    """The CPU's feature flags: ``/proc/cpuinfo``'s ``flags`` (x86) or ``Features`` (Arm) of ``info`` (default: read)."""
    info = cpuinfo() if info is None else info
    return set(info.get("flags", info.get("Features", "")).split())


def bf16_units(flags: set[str]) -> str:
    """The CPU's native BF16 arithmetic, from its feature flags: ``amx_bf16`` (AMX tiles), ``avx512_bf16`` (AVX-512
    dot products), ``bf16`` (Arm's BF16 extension), or ``none`` (no native BF16 arithmetic: converted to FP32, by
    oneDNN where the CPU has AVX-512, else by ATen's reference loops, :func:`prenet.steptime.step.cpu_bf16_note`)."""
    for flag in ("amx_bf16", "avx512_bf16", "bf16"):
        if flag in flags:
            return flag
    return "none"


def cpu_peak_tflops(threads: int, clock_mhz: float, simd_bits: int, fma_units: int = 2) -> float:
    """Peak FP32 TFLOP/s = threads × clock × (SIMD width / 32 bits) × FMA units × 2 FLOPs per FMA."""
    return threads * clock_mhz * 1e6 * (simd_bits / 32) * fma_units * 2 / 1e12


def measure_bandwidth_gbps(size_mb: float = 256, repeats: int = 5) -> float:
    """Measured memory bandwidth in GB/s: median of ``repeats`` copies of a ``size_mb`` MB float32 tensor,
    counting bytes read plus bytes written."""
    import torch  # only to measure (reading a recorded spec needs no torch)

    n = int(size_mb * 1024 * 1024) // 4
    src = torch.rand(n)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: page faults out of the timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return 2 * n * 4 / statistics.median(times) / 1e9


def measure_l2_bandwidth_gbps(l2_mb: float, share: float = 0.75, repeats: int = 200) -> float:
    """Bandwidth (GB/s) of an in-place add ``a += b`` whose two float32 operands together fill ``share`` of a core's
    ``l2_mb`` MB of L2, counting two reads and one write per element: the fastest of ``repeats`` timed loops (each
    loop ~0.2 ms of adds, so the timer's cost is out of it; a neighbour only slows a reading). An optimizer's update
    or an activation of a small layer runs at this speed when its tensors stay in L2, faster than a copy through the
    last-level cache (this Intel Xeon, 2026-12-07, one thread: 150 GB/s at 1.5 MB against 30 GB/s at 4-64 MB)."""
    import torch

    n = max(1024, int(share * l2_mb * 2**20 / 2 / 4))
    a, b = torch.rand(n), torch.rand(n)
    inner = max(1, int(2e-4 * 100e9 / (12 * n)))  # ~0.2 ms a loop at ~100 GB/s
    a.add_(b, alpha=1e-9)  # warm-up: both operands into the caches
    best = float("inf")
    for _ in range(max(3, repeats // inner)):
        t0 = time.perf_counter()
        for _ in range(inner):
            a.add_(b, alpha=1e-9)
        best = min(best, (time.perf_counter() - t0) / inner)
    return 3 * n * 4 / best / 1e9


#: Copy footprints (MB, source + destination) at which :func:`measure_cache_mb` reads the bandwidth.
CACHE_FOOTPRINTS_MB = (2, 4, 8, 12, 16, 24, 32, 48, 64)


#: A working set holds in the caches while a copy of it still runs this share of the way from DRAM to cache
#: bandwidth: most of its accesses hit. Read there, the knee is steep and the reading steady (this host, 2026-12-05,
#: 8 readings within minutes: 12.3-13.2 MB, where the half-way crossing read 19.8-20.8 MB then and 12.4-23.7 MB over
#: the day; the zoo's steps put the capacity between 9.5 MB of data that stays warm and 18 MB that does not).
CACHE_HOLD_SHARE = 0.75


def measure_cache_mb(cache_bw_gbps: float, dram_bw_gbps: float, repeats: int = 15, passes: int = 3) -> float:
    """How large a working set (MB) still runs from the caches: the copy footprint (source + destination) at which the
    measured bandwidth falls below :data:`CACHE_HOLD_SHARE` of the way from ``dram_bw_gbps`` to ``cache_bw_gbps``,
    interpolated between the footprints of :data:`CACHE_FOOTPRINTS_MB` around the crossing, each footprint's reading
    the fastest of 3 (a neighbour only slows a reading), the median of ``passes`` such crossings. Measured, not read
    off the L3 size: on a shared host (this one: a 32 MB L3, 2 vCPUs) a 16 MB copy already runs at ~70 % of the cache
    bandwidth (2026-12-05: 93 GB/s at 4 MB, 77 at 12, 70 at 16, 46 at 24, 26 at 64)."""
    return float(statistics.median(_cache_crossing_mb(cache_bw_gbps, dram_bw_gbps, repeats) for _ in range(passes)))


def _cache_crossing_mb(cache_bw_gbps: float, dram_bw_gbps: float, repeats: int) -> float:
    """One reading of :func:`measure_cache_mb`'s crossing (MB)."""
    threshold = dram_bw_gbps + CACHE_HOLD_SHARE * (cache_bw_gbps - dram_bw_gbps)
    prev = None
    for fp in CACHE_FOOTPRINTS_MB:
        bw = max(measure_bandwidth_gbps(fp / 2, repeats) for _ in range(3))
        if bw < threshold:
            if prev is None:
                return float(fp)
            return float(prev[0] + (fp - prev[0]) * (prev[1] - threshold) / (prev[1] - bw))
        prev = (fp, bw)
    return float(CACHE_FOOTPRINTS_MB[-1])


def measure_gemm_tflops(dtype: torch.dtype | None = None, n: int = 1024, repeats: int = 5) -> float:
    """Attained TFLOP/s of an n×n×n matrix product in ``dtype`` on the current thread setting (best of ``repeats``
    after a warm-up, over the weight layouts a 256³ product does not rule out: BF16 kernels differ by 10× between them on some CPUs): the CPU's
    practical peak, measured instead of derived from the clock and SIMD width (``dtype`` None: float32)."""
    import torch

    dtype = torch.float32 if dtype is None else dtype

    def layouts(size: int) -> tuple:
        a, b = torch.rand(size, size).to(dtype), torch.rand(size, size).to(dtype)
        return (lambda: torch.mm(a, b), lambda: torch.mm(a, b.t()))

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    # which layouts can hold the best time, from two small products each: a layout 3x slower than the other cannot
    # (BF16 on a CPU without BF16 units: 0.9 against 9 GFLOP/s, 2.3 s per call of the slow one at n = 1024, which every
    # detection paid three times before it was ruled out at this size)
    probe = [min(timed(fn), timed(fn)) for fn in layouts(min(n, 256))]  # twice: a first call may pay a kernel's set-up
    best = float("inf")
    for fn, p in zip(layouts(n), probe):
        if p > 3 * min(probe):
            continue
        best = min(best, timed(fn))  # the warm-up, kept where it is the best
        for _ in range(repeats):
            best = min(best, timed(fn))
    return 2 * n**3 / best / 1e12


def _l2_mb() -> float | None:
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    except OSError:
        return None
    scale = {"K": 1 / 1024, "M": 1.0}.get(text[-1:], 1 / 2**20)
    return float(text.rstrip("KM")) * scale


#: Passes of the peak and bandwidth readings in :func:`detect_cpu`, interleaved; each figure is its best pass. A
#: neighbour only slows a reading, and a slow spell lasts seconds: a fresh clone's single pass once recorded 0.079
#: TFLOP/s and 14 GB/s where this host reads 0.099 and 21 (2026-12-05); its ops then ran faster than the recorded peak,
#: their efficiencies were clipped at 1, and the zoo's steps were predicted 17-25 % too slow.
DETECT_PASSES = 3


@lru_cache(maxsize=8)
def detect_cpu(threads: int = 1, bandwidth_mb: int = 256) -> HardwareSpec:
    """Describe this machine's CPU as used with ``threads`` threads.

    Peak FP32 and BF16 FLOP/s are **measured** with a 1024³ matrix product on ``threads`` threads (the clock × SIMD
    width figure, which assumes 2 FMA units, is kept in ``extra`` for reference); the DRAM bandwidth (a 256 MB copy)
    the last-level-cache bandwidth (a 4 MB copy) and the L2's (:func:`measure_l2_bandwidth_gbps`, where the L2 size is
    known) are measured too, each figure the best of :data:`DETECT_PASSES`
    interleaved passes; then how large a working set stays in the caches (:func:`measure_cache_mb`).
    """
    info = cpuinfo()
    model = cpu_model(info)
    flags = cpu_flags(info)
    clock = _cpu_clock_mhz(info)
    simd = simd_width_bits(flags)
    cores = os.cpu_count() or 1
    used = max(1, min(threads, cores))
    import torch

    before = torch.get_num_threads()
    bw = fp32 = bf16 = cache_bw = l2_bw = 0.0
    l2_mb = _l2_mb()
    for _ in range(DETECT_PASSES):  # interleaved, each the best of its passes (see DETECT_PASSES)
        bw = max(bw, measure_bandwidth_gbps(bandwidth_mb))  # at the caller's thread setting, as before
        torch.set_num_threads(used)
        try:
            fp32 = max(fp32, measure_gemm_tflops(torch.float32))
            bf16 = max(bf16, measure_gemm_tflops(torch.bfloat16))
            cache_bw = max(cache_bw, measure_bandwidth_gbps(4, repeats=20))
            if l2_mb:
                l2_bw = max(l2_bw, measure_l2_bandwidth_gbps(l2_mb))
        finally:
            torch.set_num_threads(before)
    torch.set_num_threads(used)
    try:
        cache_bw = max(cache_bw, bw)
        cache_mb = measure_cache_mb(cache_bw, bw)
    finally:
        torch.set_num_threads(before)
    return HardwareSpec(
        hardware_id=cpu_id(info),
        kind="cpu",
        peak_fp32_tflops=fp32,
        mem_bw_gbps=bw,
        cores=used,
        clock_mhz=clock,
        l2_mb=l2_mb,
        sms=used,
        source="local detection (GEMM-measured peaks, copy-measured bandwidth)",
        peak_bf16_tflops=bf16,
        cache_bw_gbps=cache_bw,
        l2_bw_gbps=max(l2_bw, cache_bw) if l2_mb else None,
        cache_mb=cache_mb,
        extra={
            "model": model,
            "simd_bits": simd,
            "logical_cpus": cores,
            "threads": used,
            "simd_peak_fp32_tflops": cpu_peak_tflops(used, clock, simd),
            "bf16_units": bf16_units(flags),
        },
    )


def _cpu_clock_mhz(info: dict[str, str]) -> float:
    for p in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",):
        try:
            return int(Path(p).read_text().strip()) / 1000.0
        except (OSError, ValueError):
            pass
    try:
        return float(info["cpu MHz"])
    except (KeyError, ValueError):
        return 2500.0  # documented fallback when the OS reports no clock


def detect_cuda(index: int = 0) -> HardwareSpec:
    """Describe CUDA device ``index`` by matching its name against the catalog."""
    import torch

    if not torch.cuda.is_available():
        raise PrenetError("hardware device 'cuda' was requested but torch sees no CUDA device; use hardware=local (CPU)")
    from prenet.hardware.catalog import get

    props = torch.cuda.get_device_properties(index)
    name = props.name
    for candidate in (name, name.replace("NVIDIA ", ""), " ".join(name.replace("NVIDIA ", "").split()[:2])):
        try:
            spec = get(candidate)
            return HardwareSpec(**{**spec.to_dict(), "source": f"catalog match for CUDA device {name!r}"})
        except UnknownHardwareError:
            continue
    raise PrenetError(
        f"CUDA device {name!r} is not in the hardware catalog; describe it in a YAML spec file "
        "(docs/hardware.md, spec files) and pass its path as the hardware"
    )


def local_id(device: str = "cpu") -> str:
    """The hardware id of this machine's CPU, or of its CUDA device, without measuring anything (what a timing row is
    labelled with)."""
    return detect_cuda().hardware_id if device.startswith("cuda") else cpu_id()


def recorded_spec(path: str | Path) -> HardwareSpec:
    """The spec a hardware record holds (``paths.hardware_record``, written by the ``benchmark`` stage)."""
    import json

    d = json.loads(Path(path).read_text())
    return HardwareSpec(**{k: v for k, v in d.items() if k in HardwareSpec.__dataclass_fields__})


def recorded_cpu(path: str | Path | None, threads: int) -> HardwareSpec | None:
    """The benchmark stage's detection of this CPU at ``threads`` threads, if ``path`` records exactly that (the spec
    the op models were trained with); else None."""
    if path is None or not Path(path).is_file():
        return None
    spec = recorded_spec(path)
    used = max(1, min(threads, os.cpu_count() or 1))
    if spec.kind != "cpu" or spec.hardware_id != cpu_id() or int(spec.extra.get("threads", spec.cores or 0)) != used:
        return None
    return spec


#: The stored spec's layout (:func:`stored_cpu`): bump when :class:`HardwareSpec` or what :func:`detect_cpu` measures
#: changes, so a spec measured by older code is measured again rather than read without the new fields.
STORE_FORMAT = 1


def stored_cpu(threads: int) -> HardwareSpec:
    """This CPU at ``threads`` threads as first measured on this machine (:func:`detect_cpu`), kept in
    the user's store (:func:`prenet.paths.user_store` ``hardware``; measured every time where the store is off).
    Measured afresh at each answer, the same question was answered 794, 1,667 and 2,001 ms (a new user's 2-thread
    ResNet step, 2026-12-06: the peaks and the cache size read off a loaded host each time); read back, it is one spec.
    ``extra["measured_at"]`` says when (UTC); delete the file to measure again."""
    import dataclasses
    import datetime
    import json
    import tempfile

    from prenet.paths import user_store

    folder = user_store("hardware")
    used = max(1, min(threads, os.cpu_count() or 1))
    path = None if folder is None else folder / f"{cpu_id()}-{used}t-v{STORE_FORMAT}.json"
    if path is not None and path.is_file():
        try:
            return recorded_spec(path)
        except Exception:  # noqa: BLE001 — a damaged or foreign file: measured again, written anew
            pass
    measured = detect_cpu(threads)  # its result is cached: not changed in place
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    spec = dataclasses.replace(measured, extra={**measured.extra, "measured_at": at})
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
                f.write(json.dumps(spec.to_dict(), indent=1, sort_keys=True))
            os.replace(f.name, path)  # whole or not at all: two answers at once never read half a file
        except OSError:  # a read-only home: answered, not stored
            pass
    return spec


def detect_local(threads: int = 1, device: str = "cpu", record: str | Path | None = None) -> HardwareSpec:
    """This machine's CPU, or its CUDA device when ``device`` is ``cuda``. The CPU comes from ``record`` (the
    benchmark stage's hardware record) when that describes this CPU at ``threads`` threads: measuring the GEMM peaks
    again takes seconds to tens of seconds (BF16 without native support) and would differ from the spec the models
    learned by the measurement noise. Otherwise it is measured now."""
    if device.startswith("cuda"):
        return detect_cuda()
    return recorded_cpu(record, threads) or detect_cpu(threads)
