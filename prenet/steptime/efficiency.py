"""Op-level step time: roofline time ÷ a learned efficiency in (0, 1), per operator family and device kind.

    roofline_ms = max(FLOPs / (peak of the op's unit × algorithmic gain), bytes × passes / memory bandwidth)
                  (CPU: last-level-cache bandwidth; gain: 2.25 for Winograd 3×3 convolutions on GPUs, else 1;
                  passes: 1.5 and 5/3 for batch norm's forward and backward, else 1)
    time_ms     = roofline_ms / efficiency,   efficiency = sigmoid(z),  z = XGBoost(features)

The efficiency is bounded, so no prediction beats the roofline, and a GPU never benchmarked follows its spec
sheet: its peaks, bandwidth, SM count and L2 enter both the roofline and the features. Features: the op's FLOPs,
bytes, arithmetic intensity against the device's ridge point, its GEMM view (m, n, k, batch, groups), the tile
and wave count of a 128×128-tile schedule over the SMs (cores on a CPU) and the tail wave's occupancy, bytes
against L2, the alignment of m, n, k (powers of two dividing them) and of the row strides in bytes, the per-element work class of elementwise
ops (add < divide < transcendental < random draw), the dtype and unit; the spec sheet enters through these (not as raw features, see ``FEATURES``).

A family without a model on a device kind is answered by the model of an analogous family
(:data:`prenet.ops.families.ANALOGY`), and without that by its roofline ÷ the median efficiency of every training
op of that device kind; a tensor-core unit its family's trees saw too few ops of is answered through its sibling
unit's kernels (:data:`UNIT_PROXY`); each answer names which (``estimate`` column: ``model``, ``analogy:<family>``,
``unit:<unit>`` (or ``analogy:<family>+unit:<unit>``), ``roofline``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from prenet.cpu_identity import cpu_id
from prenet.errors import PrenetError
from prenet.hardware.power import at_boost_clock
from prenet.hardware.spec import HardwareSpec
from prenet.host_speed import HostSpeed, host_speed, host_speed_mode
from prenet.ops.families import ANALOGY, TENSOR_CORE_UNITS, TENSOR_GROUPED_CONV, op_class, winograd_3x3
from prenet.steptime.forest import Forest

FEATURES: tuple[str, ...] = (
    "log2_flops",
    "log2_bytes",
    "log2_intensity",
    "log2_ridge_ratio",
    "log2_roofline_ms",
    "log2_m",
    "log2_n",
    "log2_k",
    "log2_batch",
    "log2_groups",
    "log2_tiles",
    "log2_waves",
    "tail_occupancy",
    "log2_bytes_per_l2",
    "log2_out_numel",
    "log2_write_ratio",
    "dtype_bytes",
    "unit_code",
    "phase_code",
    "tf1",
    "kernel_only",
    "hw_log2_l2",
    "layout",
    "align_m",
    "align_n",
    "align_k",
    "stride_pow2_a",
    "stride_pow2_b",
    "op_class",
)
# The spec sheet enters through the roofline, the ridge ratio, the waves over the SMs and bytes per L2. Raw peak,
# bandwidth, SM count and clock as features of their own let the trees recognise the ~10 training GPUs instead of
# generalising: leave-one-GPU-out mean MAPE 27.0 % with them, 24.9 % without; peak FLOP/s per board watt (power
# headroom: T4, L4) made it 26.4 % (2026-11-30).
TILE = 128
#: A tensor-core unit whose ops a family's trees barely saw is answered through its sibling's kernels: a TF32 op at the
#: efficiency the trees give the same op in FP16 (same cuDNN/cuBLAS tensor-core kernels; TF32 runs at half FP16's
#: rate and moves FP32 operands, which its own roofline holds), against the TF32 op's own roofline. No TF32
#: convolution was ever measured here: the trees placed TF32 (unit code 1) among FP32 convolutions, at FP32
#: efficiencies against the 8x larger TF32 peak, and DeepLearningExamples' EfficientNets on an A100 in TF32 were
#: answered 19-25 % too fast (DLE TF32 MAPE 16.5 %, 2026-12-06). ``estimate`` names it ``unit:<sibling>``.
UNIT_PROXY = {"tf32": "fp16"}
#: The element type of each unit's operands
UNIT_DTYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_UNIT_CODE = {"fp32": 0.0, "tf32": 1.0, "fp16": 2.0, "bf16": 2.0}
_PHASE_CODE = {"forward": 0.0, "backward": 1.0, "optimizer": 2.0}
_DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float64": 8.0, "int64": 8.0}
EFF_MIN, EFF_MAX = 1e-6, 0.999


class UnsupportedPrecisionError(PrenetError):
    """The hardware has no arithmetic unit for the precision asked."""


def peaks(frame: pl.DataFrame, hw: HardwareSpec) -> np.ndarray:
    """Peak FLOP/s of each op's unit on ``hw`` at the clock it sustains (:attr:`HardwareSpec.compute_clock_share`: a
    power-limited board runs below boost); raises :class:`UnsupportedPrecisionError` naming the unit the spec lacks."""
    out = np.empty(frame.height)
    units = frame.get_column("unit").to_numpy()
    for u in np.unique(units):
        p = hw.peak_tflops(str(u))
        if p is None:
            what = {"tf32": "TF32 tensor cores", "fp16": "FP16 tensor-core peak", "bf16": "BF16 peak"}.get(str(u), str(u))
            spec_file = (hw.extra or {}).get("spec_file")  # a user's YAML (load_spec_yaml): the key may only be missing
            raise UnsupportedPrecisionError(
                f"{hw.hardware_id} has no {what} in its spec sheet; its GEMMs cannot run in {u} "
                f"(choose another --precision, e.g. fp32{', fp16' if hw.peak_fp16_tflops else ''}"
                + (f"; or give peak_{u}_tflops in {spec_file}, the dense tensor-core peak" if spec_file else "")
                + ")"
            )
        out[units == u] = p * 1e12 * hw.compute_clock_share
    return out


def roofline_bandwidth_gbps(hw: HardwareSpec) -> float:
    """The bandwidth of the memory roofline: a GPU's DRAM (HBM/GDDR) bandwidth from its spec sheet; a CPU's fastest
    measured cache bandwidth, its L2's (:attr:`HardwareSpec.l2_bw_gbps`) or else its last-level cache's, when known (no
    op beats it; ops that reach the last-level cache or DRAM show as lower efficiency, read off their bytes per L2)."""
    if hw.kind == "cpu":
        return max(hw.l2_bw_gbps or 0.0, hw.cache_bw_gbps or 0.0) or hw.mem_bw_gbps
    return hw.mem_bw_gbps


#: Multiplies saved by Winograd's F(2×2, 3×3) on dense 3×3 stride-1 convolutions, which cuDNN picks for FP32 on a GPU's
#: CUDA cores: the direct FLOPs at peak are no bound for them (up to 2.5× faster than that in NeuSight's, Justus' and
#: DeepBench's FP32 timings, median 0.61 of it). CPUs (oneDNN's direct/GEMM convolutions here) get no such gain, nor do
#: tensor-core units (FP16/BF16/TF32: cuDNN's implicit-GEMM kernels). The gain is taken where an op carries its
#: ``shapes``: the ops of a traced step, not the op tables the trees are fitted and scored on (``pipeline.op_tables``
#: keeps the schema's columns), so the trees never saw it: their FP32 Winograd rows sit clipped at the peak, and the
#: gain lets such a convolution beat it in a step. On tensor-core units it let the FP16 ones run at 1.3-1.4× the
#: tensor peak (VGG-16 on a TITAN RTX / RTX 2080 Ti) where NCHW FP16 VGG steps ran only 1.5-2× faster than FP32 ones;
#: without it there (2026-12-08): pytorch-gpu-benchmark's pure-FP16 steps 33.2 → 28.2 % MAPE, its A100 TF32 steps
#: 26.4 → 18.2 %, every other check unchanged. Fitting with the gain (the shapes kept) was tried and not kept: op
#: holdout FP16 25.4 → 23.0 %, FP32 14.2 → 13.7 %, but DeepLearningExamples' FP32 steps 5.4 → 28 % and
#: pytorch-gpu-benchmark's FP32 ones 21.5 → 34 % (too slow), with or without a Winograd feature.
WINOGRAD_GAIN = 2.25


#: Arithmetic per element of a random draw (``op_class`` 3: dropout's ``bernoulli_``, ``uniform_``, ``normal_``), in
#: FLOP-equivalents: a counter-based generator (Philox-4x32-10: 10 rounds of 2 multiplies and 4 xors per 4 outputs)
#: plus the conversion and comparison, ~20 per element. The traced FLOPs count 1 per element, so the roofline called
#: these memory-bound at any size and the trees, which do not extrapolate, flattened their time beyond the measured
#: sizes: a 1 M-element ``bernoulli_`` was predicted 1.6 ms on this CPU and took 6.2 ms, 5.8 ns per element as
#: at every measured size from 10 k to 139 k (2026-12-05). On a GPU the draw stays memory-bound.
RANDOM_DRAW_FLOPS_PER_ELEMENT = 20.0


def algorithmic_gain(frame: pl.DataFrame, hw: HardwareSpec) -> np.ndarray:
    """Per op, by how much the device's fastest algorithm cuts the counted FLOPs: 1 but for GPU Winograd convolutions,
    and 1 / :data:`RANDOM_DRAW_FLOPS_PER_ELEMENT` for a random draw (its generator's arithmetic, not counted)."""
    gain = np.ones(frame.height)
    if "op" in frame.columns:
        ops = frame.get_column("op")
        draws = [o for o in ops.unique().to_list() if op_class(o) == 3]  # one look-up per distinct op
        gain[ops.is_in(draws).to_numpy()] = 1.0 / RANDOM_DRAW_FLOPS_PER_ELEMENT
    if hw.kind != "gpu" or "shapes" not in frame.columns:
        return gain
    fams = frame.get_column("family").to_numpy()
    units = frame.get_column("unit").to_numpy().astype(str) if "unit" in frame.columns else np.full(frame.height, "fp32")
    for i in np.flatnonzero((fams == "conv") & ~np.isin(units, list(TENSOR_CORE_UNITS))):
        r = frame.row(int(i), named=True)
        if winograd_3x3(r["op"], r["shapes"], r.get("out_shapes"), int(r.get("groups") or 1)):
            gain[i] = WINOGRAD_GAIN
    return gain


#: Passes over its tensors a batch norm of a training step makes, against the one its traced bytes (operands + results)
#: count: the statistics reduce over N×H×W, so the input is read once for them and again to normalise (forward: x, x, y:
#: 3 tensors for 2), and the backward reduces dy·x before it writes dx (dy, x, then dy, x, dx: 5 for 3); torch's CUDA
#: kernels (``batch_norm_collect_statistics`` + ``batch_norm_transform_input``, ``batch_norm_backward_reduce`` +
#: ``batch_norm_backward_elemt``, their channels-last twins) run so. The GPU ``norm`` model is fitted on LayerNorm rows,
#: one pass with each row in registers, so without this batch norm came out 1.5× too fast: DeepLearningExamples'
#: EfficientNets 20-24 % too fast (2026-12-05). A batch norm in eval mode (one pass) is counted the same: a traced
#: training step runs it in training mode unless the user froze it.
MEMORY_PASSES = {"native_batch_norm": 1.5, "cudnn_batch_norm": 1.5, "native_batch_norm_backward": 5 / 3, "cudnn_batch_norm_backward": 5 / 3}


def memory_passes(frame: pl.DataFrame) -> np.ndarray:
    """Per op, its memory traffic over its traced bytes (:data:`MEMORY_PASSES`; 1 for every other op)."""
    ops = frame.get_column("op").to_list()
    return np.array([MEMORY_PASSES.get(o, 1.0) for o in ops])


def roofline_ms(frame: pl.DataFrame, hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """(compute-bound ms, memory-bound ms) of every op on ``hw``."""
    compute = frame.get_column("flops").to_numpy().astype(float) / (peaks(frame, hw) * algorithmic_gain(frame, hw)) * 1e3
    memory = frame.get_column("bytes").to_numpy().astype(float) * memory_passes(frame) / (roofline_bandwidth_gbps(hw) * 1e9) * 1e3
    return compute, memory


def _log2(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 0.0) + 1.0)


def alignment(dim: np.ndarray, cap: int = 64) -> np.ndarray:
    """log2 of the largest power of two (≤ ``cap``) dividing each GEMM dimension: 0 for odd sizes, 6 for multiples of
    64. Vector units and GEMM micro-kernels run aligned shapes faster (real models use 64, 768, 3072, not 2220)."""
    d = np.maximum(np.asarray(dim, dtype=np.int64), 0)
    return np.where(d > 0, np.log2(np.gcd(d, cap)), 0.0)


#: The largest row stride (bytes) :func:`stride_pow2` tells apart: 16 KB, four 4 KB pages
STRIDE_POW2_CAP = 2**14


def stride_pow2(dim: np.ndarray, elem_bytes: np.ndarray, gemm: np.ndarray) -> np.ndarray:
    """log2 of the largest power of two (≤ :data:`STRIDE_POW2_CAP`) dividing the row stride in bytes of a GEMM operand
    whose rows are ``dim`` elements of ``elem_bytes``; 0 outside ``gemm`` (a mask: a CPU's GEMMs; on GPUs the feature
    moved the unseen-GPU answers, NeuSight's FP32 steps 5.5 -> 7.2 % MAPE). Rows a multiple of 2-4 KB apart map to the same cache sets: ATen's reference BF16 GEMM on
    a CPU without BF16 units, walking a row-major second operand down its columns, ran 16x1024 @ 1024x1024 at 0.97
    GFLOP/s, 16x1000 @ 1000x1000 at 1.64 and 16x2048 @ 2048x2048 at 0.27 (AMD EPYC, 2026-12-06); :func:`alignment`
    stops at 64 elements and cannot tell them apart."""
    b = np.maximum(np.asarray(dim, dtype=np.int64), 0) * np.asarray(elem_bytes, dtype=np.int64)
    return np.where(gemm & (b > 0), np.log2(np.gcd(b, STRIDE_POW2_CAP)), 0.0)


def write_ratio(g: dict[str, np.ndarray], conv: np.ndarray) -> np.ndarray:
    """log2 of the elements a convolution (``conv``: a row mask) writes per element of its implicit GEMM's output
    (``out_numel`` / groups·m·n; 0 for every other op and where ``out_numel`` is unknown). 0 for a convolution's
    forward (log2 C_out/C_in for a transposed one); its backward carries the input gradient it scatters back, stride²
    times the output's pixels (× C_in/C_out for a dense one), and, where it is one op (a CPU trace), the weight gradient
    too: a deep layer of large weights on few pixels reads high for its weights, not its stride (VGG-16's 512-channel
    3x3 layer on 4x4 pixels at batch 16: ~4.3). On a CPU a BF16 depthwise backward of stride 2 ran 5-20x its FP32 time
    while stride 1 ran at it, and the trees could not tell the two apart from m, out_numel and groups (2026-12-06, issue
    28). Attention and GEMMs keep 0: their GEMM views are not what they write (on attention the ratio moved a ViT's
    BF16 answer by -15 %)."""
    view = np.maximum(g["batch"], 1) * g["m"] * np.maximum(g["n"], 1)
    ok = conv & (g["m"] > 0) & (g["out_numel"] > 0)
    return np.where(ok, np.log2(np.maximum(g["out_numel"], 1) / np.maximum(view, 1)), 0.0)


def feature_matrix(frame: pl.DataFrame, hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """(features [rows × FEATURES], roofline ms) of ``frame``'s ops on ``hw``."""
    compute, memory = roofline_ms(frame, hw)
    roof = np.maximum(compute, memory)
    g = {c: frame.get_column(c).to_numpy().astype(float) for c in ("flops", "bytes", "m", "n", "k", "batch", "groups", "out_numel")}
    sms = float(hw.sms or hw.cores or 1)
    gemm = (g["m"] > 0) & (g["k"] > 0)  # a batch norm's view has no k (prenet.ops.accounting.gemm_view)
    tiles = np.where(
        gemm,
        np.maximum(g["batch"], 1) * np.ceil(g["m"] / TILE) * np.ceil(np.maximum(g["n"], 1) / TILE),
        np.ceil(np.maximum(g["out_numel"], 1) / (TILE * TILE)),
    )
    waves = np.ceil(tiles / sms)
    l2_bytes = (hw.l2_mb or 1.0) * 2**20
    tf1 = frame.get_column("tf1").to_numpy().astype(float) if "tf1" in frame.columns else np.zeros(frame.height)
    # 1 for a bare kernel's time (DeepBench, XLA: no framework dispatch around it); 0 for an op timed in PyTorch and for
    # every op of a step prenet predicts
    elem = np.array([_DTYPE_BYTES.get(d, 4.0) for d in frame.get_column("dtype").to_list()])
    # cache-set aliasing of row strides in a CPU's GEMMs (GPU GEMMs tile through shared memory): ATen's reference loops
    # run 16-bit ones on a CPU without BF16 units or AVX-512, and MKL's packed FP32 GEMMs alias too where the weight
    # stays in cache: 16 x d @ d x d at one thread on this AMD EPYC (2026-12-07), forward / weight-gradient GFLOP/s at
    # d = 960, 1000, 1008, 1040: 49-58 / 50-63; at d = 1024: 37 / 38 (at 2048 the 16 MB weight streams from DRAM and
    # 2000, 2048 and 2064 all run 32-36). Where a CPU's GEMMs do not alias, its own benchmark's trees find the feature
    # uninformative
    cpu_gemm = (hw.kind == "cpu") & (frame.get_column("family").to_numpy().astype(str) == "gemm")
    lay = frame.get_column("layout").to_numpy().astype(np.int64) if "layout" in frame.columns else np.zeros(frame.height, dtype=np.int64)
    kernel_only = frame.get_column("kernel_only").fill_null(0).to_numpy().astype(float) if "kernel_only" in frame.columns else np.zeros(frame.height)
    cols = {
        "log2_flops": _log2(g["flops"]),
        "log2_bytes": _log2(g["bytes"]),
        "log2_intensity": np.log2((g["flops"] + 1) / (g["bytes"] + 1)),
        "log2_ridge_ratio": np.log2((compute + 1e-9) / (memory + 1e-9)),
        "log2_roofline_ms": np.log2(roof + 1e-9),
        "log2_m": _log2(g["m"]),
        "log2_n": _log2(g["n"]),
        "log2_k": _log2(g["k"]),
        "log2_batch": _log2(g["batch"]),
        "log2_groups": _log2(g["groups"]),
        "log2_tiles": _log2(tiles),
        "log2_waves": _log2(waves),
        "tail_occupancy": tiles / (waves * sms),
        "log2_bytes_per_l2": np.log2((g["bytes"] + 1) / l2_bytes),
        "log2_out_numel": _log2(g["out_numel"]),
        "log2_write_ratio": write_ratio(g, frame.get_column("family").str.starts_with("conv").fill_null(False).to_numpy()),
        "dtype_bytes": elem,
        "unit_code": np.array([_UNIT_CODE.get(u, 0.0) for u in frame.get_column("unit").to_list()]),
        # a CPU GEMM's phase is not its kernel: forward or backward, one ATen mm runs on its operands' layout and
        # strides (features of their own). The op data's BF16 GEMMs came from nn.Linear, forward always B-transposed,
        # so the trees read the phase as the layout and answered a forward x @ W (W stored in x out, as functional
        # code and HF's Conv1D run it) at the transposed speed: 64x1024 @ 1024x1024 in BF16 on ATen's reference loops,
        # 80 ms answered against 139-145 timed in place (AMD EPYC, 2026-12-07)
        "phase_code": np.where(cpu_gemm, 0.0, np.array([_PHASE_CODE.get(p, 0.0) for p in frame.get_column("phase").to_list()])),
        "tf1": tf1,
        "kernel_only": kernel_only,
        "layout": frame.get_column("layout").to_numpy().astype(float) if "layout" in frame.columns else np.zeros(frame.height),
        "hw_log2_l2": np.full(frame.height, math.log2(hw.l2_mb or 1.0)),
        "align_m": alignment(g["m"]),
        "align_n": alignment(g["n"]),
        "align_k": alignment(g["k"]),
        # A (m × k) is stored k apart, or m where transposed (layout bit 1); B (k × n) n apart, or k (bit 2)
        "stride_pow2_a": stride_pow2(np.where(lay & 1, g["m"], g["k"]), elem, gemm & cpu_gemm),
        "stride_pow2_b": stride_pow2(np.where(lay & 2, g["k"], g["n"]), elem, gemm & cpu_gemm),
        "op_class": np.array([float(op_class(o)) for o in frame.get_column("op").to_list()]),
    }
    return np.column_stack([cols[f] for f in FEATURES]), roof


def _logit(eff: np.ndarray) -> np.ndarray:
    e = np.clip(eff, EFF_MIN, EFF_MAX)
    return np.log(e / (1 - e))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@dataclass
class EfficiencyModel:
    """Per (device kind, family) tree ensembles predicting logit(efficiency), plus the median efficiency per device kind.
    Trained with XGBoost; evaluated by :class:`~prenet.steptime.forest.Forest` (no xgboost import to answer)."""

    boosters: dict[str, Forest] = field(default_factory=dict)  # "gpu/gemm" → its trees
    median_efficiency: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    #: per device kind, the host's cost of issuing one op (ms; :mod:`prenet.steptime.host`), fitted after the trees; a
    #: kind without one (the CPU, whose measured op times already hold it) pipelines nothing
    host_ms: dict[str, float] = field(default_factory=dict)
    #: the devices whose measured ops the trees were fitted on: their timings already ran at the clock their power
    #: allowed, so they are answered at their spec-sheet (boost) peaks (:meth:`clock_for`)
    measured_devices: list[str] = field(default_factory=list)
    #: per "device kind/family", the training rows of each arithmetic unit: a tensor-core unit with fewer than
    #: ``min_rows`` of them is answered through its sibling unit's kernels (:data:`UNIT_PROXY`, :meth:`predict_many`)
    unit_rows: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the fewest training rows of a unit within a (device kind, family) that answer that unit's ops with their own
    #: features (:meth:`unit_proxy`); a family's own threshold is ``fit``'s ``min_rows`` / ``min_rows_family``
    min_rows: int = 30
    #: per measured CPU, the speed probe of its op benchmark (:mod:`prenet.measurement.probe`): ``threads`` and the
    #: distinct ``probe_ms`` samples (ms) of the rows the trees were fitted on, what an answer's probe now compares with
    host_probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per hardware id, the host speed its answers are scaled to (:meth:`at_host_speed`; not saved: a property of the
    #: process that answers)
    host_speeds: dict[str, HostSpeed] = field(default_factory=dict)

    def measured(self, hw: HardwareSpec) -> bool:
        """Whether ``hw``'s own measured ops trained this model."""
        return hw.hardware_id in self.measured_devices

    def clock_for(self, hw: HardwareSpec) -> HardwareSpec:
        """``hw`` as this model answers it: at its sustained clock (:mod:`prenet.hardware.power`) unless its own measured
        ops trained the model, whose efficiencies then already hold its power limit (a seen T4 scaled again was
        double-counted: frozen-holdout GPU FP16 26.0 → 31.8 %, FP32 12.9 → 14.9 %, 2026-12-05)."""
        return at_boost_clock(hw) if self.measured(hw) else hw

    def at_host_speed(self, hw: HardwareSpec, mode: str | None = None) -> HostSpeed | None:
        """Answer ``hw`` at this host's speed now (:mod:`prenet.host_speed`) when it is this very CPU, its own
        op benchmark trained the model and ``mode`` (None: ``$PRENET_HOST_SPEED``, default ``now``) is ``now``: its ops'
        times are then scaled by the probes' factor. Returns the :class:`HostSpeed` (None where it does not apply)."""
        self.host_speeds.pop(hw.hardware_id, None)
        ref = self.host_probes.get(hw.hardware_id)
        if host_speed_mode(mode) != "now" or hw.kind != "cpu" or ref is None or hw.hardware_id != cpu_id():
            return None
        if (speed := host_speed(list(ref["probe_ms"]), int(ref["threads"]))) is not None:
            self.host_speeds[hw.hardware_id] = speed
        return speed

    def speed_factor(self, hw: HardwareSpec) -> float:
        """What ``hw``'s recorded times are multiplied by in this process's answers (:meth:`at_host_speed`; 1 unless set)."""
        speed = self.host_speeds.get(hw.hardware_id)
        return 1.0 if speed is None else speed.factor

    @staticmethod
    def fit(
        data: list[tuple[pl.DataFrame, HardwareSpec]],
        *,
        params: dict[str, Any],
        min_rows: int = 30,
        min_rows_family: dict[str, int] | None = None,
        threads: int = 1,
    ) -> "EfficiencyModel":
        """Train on measured ops: ``data`` = [(ops with ``measured_ms`` on one device, that device)]. A (device kind,
        family) gets its own model with at least ``min_rows`` rows (``min_rows_family[family]`` where given); with fewer
        it is answered by its analogy (:data:`~prenet.ops.families.ANALOGY`).

        Efficiencies are taken against each device's spec-sheet peaks at its boost clock, not the sustained clock of a
        power-limited board (:mod:`prenet.hardware.power`), which applies to boards no op was measured on
        (:meth:`clock_for`): the vendored op timings are bursts (NeuSight's are the fastest 5 of 25 runs), and taking them against sustained clocks raised the
        efficiencies learned from the PCIe boards and made the unthrottled H100 predicted 11-16 % too fast (NeuSight
        whole-model FP32 6.7 → 10.5 %, 2026-12-05)."""
        import xgboost as xgb

        feats: dict[str, list[np.ndarray]] = {}
        targets: dict[str, list[np.ndarray]] = {}
        effs: dict[str, list[np.ndarray]] = {}
        units: dict[str, Counter[str]] = {}
        for frame, hw in data:
            hw = at_boost_clock(hw)
            frame = frame.filter(pl.col("measured_ms").is_not_null() & (pl.col("measured_ms") > 0))
            if frame.height == 0:
                continue
            x, roof = feature_matrix(frame, hw)
            eff = roof / frame.get_column("measured_ms").to_numpy()
            effs.setdefault(hw.kind, []).append(eff)
            fams = frame.get_column("family").to_numpy()
            for fam in np.unique(fams):
                key = f"{hw.kind}/{fam}"
                sel = fams == fam
                feats.setdefault(key, []).append(x[sel])
                targets.setdefault(key, []).append(_logit(eff[sel]))
                units.setdefault(key, Counter()).update(frame.get_column("unit").to_numpy()[sel].astype(str).tolist())
        model = EfficiencyModel(params=dict(params), measured_devices=sorted({hw.hardware_id for f, hw in data if f.height}), min_rows=min_rows)
        from prenet.measurement.probe import probe_samples

        for f, hw in data:
            if f.height and len(samples := probe_samples(f)) and "threads" in f.columns:
                model.host_probes[hw.hardware_id] = {"threads": int(f.get_column("threads")[0]), "probe_ms": [float(v) for v in samples]}
        for kind, e in effs.items():
            model.median_efficiency[kind] = float(np.median(np.clip(np.concatenate(e), EFF_MIN, 1.0)))
        p = {"objective": "reg:squarederror", "nthread": threads, "verbosity": 0, **{k: v for k, v in params.items() if k != "n_estimators"}}
        for key in sorted(feats):
            x = np.concatenate(feats[key])
            y = np.concatenate(targets[key])
            if len(y) < (min_rows_family or {}).get(key.split("/", 1)[1], min_rows):
                continue
            booster = xgb.train(p, xgb.DMatrix(x, label=y, feature_names=list(FEATURES)), num_boost_round=int(params.get("n_estimators", 300)))
            model.boosters[key] = Forest.from_json(bytes(booster.save_raw("json")), key)
            model.rows[key] = int(len(y))
            model.unit_rows[key] = dict(sorted(units.get(key, {}).items()))
        return model

    def unit_proxy(self, key: str, unit: str) -> str | None:
        """The unit whose kernels answer ``unit``'s ops of the trees ``key`` ("gpu/conv"): its :data:`UNIT_PROXY` sibling
        where the trees saw fewer than ``min_rows`` ops of ``unit`` and at least that many of the sibling; else None."""
        proxy = UNIT_PROXY.get(unit)
        seen = self.unit_rows.get(key, {})
        return proxy if proxy is not None and seen.get(unit, 0) < self.min_rows <= seen.get(proxy, 0) else None

    def source_of(self, kind: str, family: str) -> str:
        """How ops of ``family`` on a ``kind`` device are estimated: ``model``, ``analogy:<family>`` or ``roofline``."""
        if f"{kind}/{family}" in self.boosters:
            return "model"
        seen = {family}
        fam = family
        while fam in ANALOGY and ANALOGY[fam] not in seen:
            fam = ANALOGY[fam]
            seen.add(fam)
            if f"{kind}/{fam}" in self.boosters:
                return f"analogy:{fam}"
        return "roofline"

    def predict(self, frame: pl.DataFrame, hw: HardwareSpec) -> pl.DataFrame:
        """``frame`` plus ``roofline_ms``, ``efficiency``, ``predicted_ms`` (≥ roofline_ms) and ``estimate``."""
        return self.predict_many(frame, [hw])[0]

    def predict_many(self, frame: pl.DataFrame, hws: list[HardwareSpec], *, envelope: bool = True) -> list[pl.DataFrame]:
        """:meth:`predict` of the same ops on every hardware of ``hws``, with one tree evaluation per (device kind,
        family) over all of them (a plan over the catalog is one batched call, not one per option). A GEMM is answered
        no slower than the same GEMM with more rows (:func:`gemm_envelope`; ``envelope=False``: the trees' own answer).
        Raises :class:`UnsupportedPrecisionError` for the first hardware that lacks an op's unit (see :func:`peaks`)."""
        gemm = (frame.get_column("family") == "gemm") & (frame.get_column("m") > 0) if frame.height else None
        if envelope and gemm is not None and gemm.any():
            return gemm_envelope(self, frame, hws, gemm.to_numpy())
        if frame.height == 0:
            empty = frame.with_columns(
                pl.lit(0.0).alias("roofline_ms"), pl.lit(1.0).alias("efficiency"), pl.lit(0.0).alias("predicted_ms"), pl.lit("").alias("estimate")
            )
            return [empty for _ in hws]
        hws = [self.clock_for(hw) for hw in hws]
        feats = [feature_matrix(frame, hw) for hw in hws]
        fams = frame.get_column("family").to_numpy().astype(object)
        units = frame.get_column("unit").to_numpy().astype(str)
        on_tensor_units = np.isin(units, list(TENSOR_CORE_UNITS))
        proxied: dict[str, list[np.ndarray | None]] = {}  # unit → per hardware, its ops' features as its sibling's (lazy)
        eff = np.empty((len(hws), frame.height))
        how: dict[str, np.ndarray] = {}
        relabel: dict[int, list[tuple[np.ndarray, str]]] = {}  # per hardware: (rows, label) answered through a sibling unit
        for kind in dict.fromkeys(hw.kind for hw in hws):
            idx = [i for i, hw in enumerate(hws) if hw.kind == kind]
            eff[idx] = self.median_efficiency.get(kind, 0.5)
            how[kind] = np.empty(frame.height, dtype=object)
            answer_as = fams
            if kind == "gpu" and f"{kind}/conv_grouped" not in self.boosters:
                answer_as = np.where((fams == "conv_grouped") & on_tensor_units, TENSOR_GROUPED_CONV, fams)
            for fam in np.unique(answer_as):
                sel = answer_as == fam
                src = self.source_of(kind, str(fam))
                how[kind][sel] = src
                if src == "roofline":
                    continue
                key = f"{kind}/{fam if src == 'model' else src.split(':', 1)[1]}"
                trees = self.boosters[key]
                x = [feats[i][0] for i in idx]
                for u in sorted(set(units[sel]) & set(UNIT_PROXY)):  # a unit the trees barely saw: its sibling's features
                    if (proxy := self.unit_proxy(key, u)) is None:
                        continue
                    if u not in proxied:
                        proxied[u] = self._proxied(frame, np.flatnonzero(units == u), u, hws)
                    on = sel & (units == u)
                    label = f"unit:{proxy}" if src == "model" else f"{src}+unit:{proxy}"
                    for j, i in enumerate(idx):  # a hardware without the sibling's peak keeps the unit's own features
                        if (a := proxied[u][i]) is not None:
                            x[j] = x[j].copy()
                            x[j][on] = a[on]
                            relabel.setdefault(i, []).append((on, label))
                z = trees.predict(np.concatenate([xi[sel] for xi in x]))
                eff[np.ix_(idx, np.flatnonzero(sel))] = _sigmoid(z).reshape(len(idx), -1)
        out = []
        for i, (hw, (_, roof)) in enumerate(zip(hws, feats)):
            est = how[hw.kind].copy()
            for on, label in relabel.get(i, []):
                est[on] = label
            e = eff[i] / self.speed_factor(hw)  # this host slower now than at its op benchmark: each op as much slower
            out.append(
                frame.with_columns(
                    pl.Series("roofline_ms", roof),
                    pl.Series("efficiency", e),
                    pl.Series("predicted_ms", roof / e),
                    pl.Series("estimate", est.astype(str)),
                )
            )
        return out

    def _proxied(self, frame: pl.DataFrame, pos: np.ndarray, unit: str, hws: list[HardwareSpec]) -> list[np.ndarray | None]:
        """Per hardware, features of ``frame``'s rows (rows × FEATURES; only the rows at ``pos``, the ``unit`` ops, filled) with those ops
        recast as their :data:`UNIT_PROXY` sibling's: its unit and element size (bytes scaled by the ratio of element
        sizes); None for a hardware whose spec sheet lacks the sibling's peak."""
        proxy = UNIT_PROXY[unit]
        scale = _DTYPE_BYTES[UNIT_DTYPE[proxy]] / _DTYPE_BYTES[UNIT_DTYPE[unit]]
        alt = frame[pos].with_columns(
            pl.lit(proxy).alias("unit"),
            pl.lit(UNIT_DTYPE[proxy]).alias("dtype"),
            (pl.col("bytes") * scale).round().cast(frame.schema["bytes"]).alias("bytes"),
        )
        out: list[np.ndarray | None] = []
        for hw in hws:
            try:
                x = feature_matrix(alt, hw)[0]
            except UnsupportedPrecisionError:
                out.append(None)
                continue
            full = np.zeros((frame.height, x.shape[1]))
            full[pos] = x
            out.append(full)
        return out

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for key, b in self.boosters.items():
            b.save(d / f"{key.replace('/', '__')}.json")
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "features": list(FEATURES),
                    "models": sorted(self.boosters),
                    "rows": self.rows,
                    "median_efficiency": self.median_efficiency,
                    "params": self.params,
                    "host_ms": self.host_ms,
                    "measured_devices": self.measured_devices,
                    "unit_rows": self.unit_rows,
                    "min_rows": self.min_rows,
                    "host_probes": self.host_probes,
                },
                indent=2,
            )
        )

    @staticmethod
    def load(directory: str | Path) -> "EfficiencyModel":
        """The model saved in ``directory``; where it holds one part per device kind (:data:`PARTS`: ``gpu/``, fitted
        on the vendored GPU timings by ``train_gpu_ops``, and ``cpu/``, on the local op benchmark by ``train_ops``),
        their union (:meth:`merged`)."""
        d = Path(directory)
        parts = [d / kind for kind in PARTS if (d / kind / "manifest.json").is_file()]
        if parts:
            return EfficiencyModel.merged([EfficiencyModel._load_one(p) for p in parts])
        return EfficiencyModel._load_one(d)

    @staticmethod
    def _load_one(d: Path) -> "EfficiencyModel":
        if not (d / "manifest.json").exists():
            raise PrenetError(f"no op-level step-time model in {d}; run `dvc repro train_gpu_ops train_ops` (or `make run`) first")
        man = json.loads((d / "manifest.json").read_text())
        if man.get("features") != list(FEATURES):
            raise PrenetError(f"the op-level model in {d} was trained with other features; rerun `dvc repro train_gpu_ops train_ops`")
        files = {key: d / f"{key.replace('/', '__')}.json" for key in man["models"]}
        if missing := [p.name for p in files.values() if not p.is_file()]:
            raise PrenetError(f"the op-level model in {d} lacks {', '.join(missing)}; rerun `dvc repro train_gpu_ops train_ops`")
        boosters = LazyForests(files)
        return EfficiencyModel(
            boosters,  # type: ignore[arg-type]
            man["median_efficiency"],
            man.get("rows", {}),
            man.get("params", {}),
            man.get("host_ms", {}),
            man.get("measured_devices", []),
            man.get("unit_rows", {}),
            int(man.get("min_rows", 30)),
            host_probes=man.get("host_probes", {}),
        )

    @staticmethod
    def merged(parts: list["EfficiencyModel"]) -> "EfficiencyModel":
        """One model from parts fitted on disjoint device kinds (each key of theirs belongs to one part); they must share
        ``min_rows`` and the tree parameters, which the unit proxies and the record read as one."""
        first = parts[0]
        for other in parts[1:]:
            if (other.min_rows, other.params) != (first.min_rows, first.params):
                raise PrenetError(
                    f"the op-level model's parts were fitted with different ops.efficiency settings (min_rows "
                    f"{first.min_rows} vs {other.min_rows}); rerun `dvc repro train_gpu_ops train_ops`"
                )
        boosters: Mapping[str, Forest]
        if all(isinstance(p.boosters, LazyForests) for p in parts):  # read from disk: each file still read on first use
            boosters = LazyForests({k: f for p in parts for k, f in p.boosters.files.items()})  # type: ignore[attr-defined]
        else:
            boosters = {k: f for p in parts for k, f in p.boosters.items()}
        return EfficiencyModel(
            boosters,  # type: ignore[arg-type]
            {k: v for p in parts for k, v in p.median_efficiency.items()},
            {k: v for p in parts for k, v in p.rows.items()},
            dict(first.params),
            {k: v for p in parts for k, v in p.host_ms.items()},
            sorted({h for p in parts for h in p.measured_devices}),
            {k: v for p in parts for k, v in p.unit_rows.items()},
            first.min_rows,
            host_probes={k: v for p in parts for k, v in p.host_probes.items()},
        )


#: The parts of a saved op-level model, one folder each under ``paths.models_ops``, by device kind: a stage that
#: answers GPUs only (``train_parallel``) depends on ``gpu/`` alone, so re-benchmarking the CPU re-runs none of it.
PARTS = ("gpu", "cpu")


#: Row multiples at which :func:`gemm_envelope` also asks the trees about a GEMM (a geometric grid, ×1.5 … ×32; with
#: ×16 the last, a GEMM of 8 rows missed the 96- and 256-row answers that 16 rows reached: 7 % slower than 16 rows in
#: the fit without subsampling, 2026-12-06).
GEMM_ENVELOPE = (1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def more_rows(frame: pl.DataFrame, times: float) -> pl.DataFrame:
    """``frame``'s GEMMs with ⌈``times`` × m⌉ rows: FLOPs and output elements scale with the rows, and the bytes add
    the extra rows of the first operand and of the output (batch × (k + n) elements a row)."""
    e = pl.col("dtype").replace_strict(_DTYPE_BYTES, default=4.0, return_dtype=pl.Float64)
    rows = (pl.col("m") * times).ceil().cast(frame.schema["m"])
    scale = rows.cast(pl.Float64) / pl.col("m").cast(pl.Float64)
    extra = pl.max_horizontal(pl.col("batch"), pl.lit(1)) * (rows - pl.col("m")) * (pl.col("k") + pl.col("n")) * e
    return frame.with_columns(
        rows.alias("m"),
        (pl.col("flops") * scale).cast(frame.schema["flops"]).alias("flops"),
        (pl.col("out_numel") * scale).round().cast(frame.schema["out_numel"]).alias("out_numel"),
        (pl.col("bytes") + extra).cast(frame.schema["bytes"]).alias("bytes"),
    )


def gemm_envelope(model: "EfficiencyModel", frame: pl.DataFrame, hws: list[HardwareSpec], gemm: np.ndarray) -> list[pl.DataFrame]:
    """:meth:`EfficiencyModel.predict_many` with every GEMM (rows ``gemm``) answered at most as slow as the trees answer
    the same GEMM with 1.5 to 32 × its rows (:data:`GEMM_ENVELOPE`): a GEMM with fewer rows does less of the same
    work, and a library can always run it as the larger one, so it never takes longer. The trees, piecewise constant in
    their features, otherwise answer some small GEMMs slower than larger ones (a 1024 → 4096 linear layer on an A100
    at bf16: 0.051 ms for 8 rows against 0.035 ms for 96; now 0.035 and 0.034). The grid is finite, so the answers rise
    with the rows within a few percent, not exactly. The efficiency follows (roofline ÷ the time answered). Measured
    on the frozen evaluations (2026-12-05): unseen-GPU GEMM MAPE bf16 35.6 → 22.6 %, fp32 35.0 → 32.3 %, tf32 22.9 →
    20.2 %; the GPU FP32 per-op holdout 12.9 → 13.6 %; whole models within 1 point."""
    sub = frame.filter(pl.Series(gemm))
    big = model.predict_many(pl.concat([frame, *(more_rows(sub, t) for t in GEMM_ENVELOPE)]), hws, envelope=False)
    n, idx = frame.height, np.flatnonzero(gemm)
    out = []
    for f in big:
        t = f.get_column("predicted_ms").to_numpy()
        ms = t[:n].copy()
        ms[idx] = np.minimum(ms[idx], t[n:].reshape(len(GEMM_ENVELOPE), len(idx)).min(axis=0))
        head = f.head(n)
        roof, eff = head.get_column("roofline_ms").to_numpy(), head.get_column("efficiency").to_numpy()
        eff = np.divide(roof, ms, out=eff.astype(float).copy(), where=ms > 0)  # an op of no work keeps its own
        out.append(head.with_columns(pl.Series("predicted_ms", ms), pl.Series("efficiency", eff)))
    return out


class LazyForests(Mapping[str, Forest]):
    """``device kind/family`` → its trees, each read from its file on first use: a GPU answer never parses the CPU's
    models (reading all 19 took ~0.5 s of a CLI answer on 2 cores)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files
        self._loaded: dict[str, Forest] = {}

    @property
    def files(self) -> dict[str, Path]:
        """``device kind/family`` → the file of its trees."""
        return dict(self._files)

    def __getitem__(self, key: str) -> Forest:
        if key not in self._loaded:
            self._loaded[key] = Forest.load(self._files[key])
        return self._loaded[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)
