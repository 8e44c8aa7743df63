"""THE step-time path: a traced training step → a predicted step. ``prenet predict step-time``, ``prenet plan``, the
Python API and the ``evaluate_ops`` stage all call :func:`predict_trace` (through :func:`predict_step`), so one job
gets one number everywhere.

    step_ms = Σ over the step's ATen ops of roofline_ms / efficiency  +  the measured null-step overhead (local CPU)

On a GPU the ops are issued by the host while the GPU runs earlier ones: the step is the later of the two at every
op (:mod:`prenet.steptime.host`), Σ of the op times when the GPU is the bottleneck. On a CPU whose caches hold less
than the step's data, the step adds the DRAM fetches of the operands its ops were timed with warm
(:func:`dram_refetch_ms`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.hardware.power import power_note
from prenet.hardware.spec import HardwareSpec
from prenet.names import OPTIMIZER_STATE_BUFFERS
from prenet.ops.records import StepTrace, as_run_on, module_calls
from prenet.ops.reuse import cold_bytes
from prenet.paths import default_path
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.host import issue_bound_ms, issued

if TYPE_CHECKING:
    from torch import nn

    from prenet.host_speed import HostSpeed


@dataclass
class StepPrediction:
    """One training step on one device: ``step_seconds`` (s), the share of time per op family, and how each share was
    estimated (``model`` | ``analogy:<family>`` | ``unit:<unit>`` | ``roofline``: ``estimate_share``). ``family_ms`` are the ops' own
    device times; on a GPU ``step_seconds`` also holds the time the device waits for the host to issue them
    (``host_issue_ms``: the host's issue time of the step), so the families sum to at most the step."""

    step_seconds: float
    hardware: dict[str, Any]
    optimizer: str
    precision: str
    batch_size: int | None
    input_shape: list[int]
    params: int
    overhead_ms: float
    family_ms: dict[str, float]
    estimate_share: dict[str, float]
    ops: int
    notes: list[str] = field(default_factory=list)
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    epoch_seconds: float | None = None
    steps_per_epoch: int | None = None
    fused: bool = False  # the optimizer step as torch's one fused kernel (``fused=True``), else foreach (CUDA) / per tensor
    memory_format: str = "contiguous"  # of the 4-D tensors: contiguous (NCHW) | channels_last (NHWC)
    grad_accum: int = 1  # micro-steps of ``batch_size`` per optimizer step: the step is one optimizer step
    memory_bytes: int | None = None  # predicted peak memory of the step (bytes), when asked for
    #: the single-GPU step's memory by component (:meth:`~prenet.memory.estimate.MemoryEstimate.to_dict`, bytes), when
    #: asked for: ``memory_bytes`` is this total, or per GPU where a parallel layout shards or splits it
    memory: dict[str, int] | None = None
    host_issue_ms: float = 0.0  # the host's time to issue the step's ops (ms; GPU: ops × the fitted host cost, alongside the GPU's work; CPU: module calls × the measured cost, in turn with the ops)
    host_bound: bool = False  # issuing the ops takes longer than the GPU's work on them (the answer's note says so)
    #: CPU: the time (ms) the step's cache-sensitive ops spend fetching operands from DRAM that the op benchmark timed
    #: warm (:func:`dram_refetch_ms`); in ``step_seconds``, not in ``family_ms`` (an op's own time is its in-place one)
    dram_refetch_ms: float = 0.0
    #: CPU with a measured L2 bandwidth (the roofline's, :func:`~prenet.steptime.efficiency.roofline_bandwidth_gbps`):
    #: the time (ms) small cache-sensitive ops, timed in place from L2, spend fetching operands from the last-level
    #: cache inside the step (:func:`llc_refetch_ms`); in ``step_seconds``
    llc_refetch_ms: float = 0.0
    #: CPU: the time (ms) the step's convolutions take beyond their in-place times, run one after another
    #: (:func:`cpu_conv_sequence_share` × their predicted time); in ``step_seconds``, not in ``family_ms``
    conv_sequence_ms: float = 0.0
    #: A multi-GPU job (:class:`prenet.parallel.data_parallel.ParallelStep` as a dict): ``step_seconds`` is then its
    #: step, and ``family_ms`` the one-GPU compute it starts from. None: one device.
    parallel: dict[str, Any] | None = None
    #: This very CPU answered at its speed now (:mod:`prenet.host_speed`): ``factor`` (what every recorded time was
    #: multiplied by; 1 inside the dead band), ``measured`` (the probes' ratio), ``now_ms`` / ``then_ms`` (the fastest
    #: probe now and at the op benchmark) and ``samples``. None: answered as fitted, or not this CPU.
    host_speed: dict[str, float] | None = None

    @property
    def family_share(self) -> dict[str, float]:
        total = sum(self.family_ms.values()) or 1.0
        return {k: v / total for k, v in self.family_ms.items()}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["family_share"] = self.family_share
        return d


def device_type(hw: HardwareSpec) -> str:
    """The torch device type a hardware runs (autocast lists, foreach optimizers)."""
    return "cuda" if hw.kind == "gpu" else "cpu"


def _overhead_record(hw: HardwareSpec, path: str | Path | None) -> dict | None:
    """The ``benchmark_models`` overhead record (``path`` default: ``paths.step_overhead``, read when called) when
    ``hw`` is the CPU it was measured on, else None."""
    p = default_path("step_overhead", path)
    if hw.kind != "cpu" or not p.is_file():
        return None
    st = p.stat()
    rec = _read_overhead(str(p), (st.st_mtime_ns, st.st_size, st.st_ino))
    return rec if rec.get("hardware_id") == hw.hardware_id else None


@lru_cache(maxsize=8)
def _read_overhead(path: str, version: tuple[int, int, int]) -> dict:
    """The overhead record at ``path`` as last written (``version``: its mtime in ns, size and inode): read once for the
    null step, the module-call cost and the convolutions' share that every CPU answer takes from it, not once each.
    Read-only to its callers."""
    return json.loads(Path(path).read_text())


def cpu_module_call_ms(hw: HardwareSpec, path: str | Path | None = None) -> float:
    """The host's measured cost per module call of a CPU step beyond its ops' in-place times (ms;
    :func:`prenet.measurement.models.module_call_ms`) when ``hw`` is the CPU it was measured on, else 0."""
    rec = _overhead_record(hw, path)
    return float(rec.get("module_call_ms", 0.0)) if rec else 0.0


def cpu_conv_sequence_share(hw: HardwareSpec, precision: str, path: str | Path | None = None) -> float:
    """How much longer a CPU's convolutions run one after another in a step than repeated in place, as a share of their
    in-place time (:func:`prenet.measurement.models.conv_sequence_share`, measured in ``precision``; BF16 where the CPU
    runs it natively) when ``hw`` is the CPU it was measured on, else 0."""
    rec = _overhead_record(hw, path)
    return float((rec or {}).get("conv_sequence_share", {}).get(precision, 0.0))


def default_overhead_ms(hw: HardwareSpec, optimizer: str, path: str | Path | None = None) -> float:
    """The measured null-step overhead (``benchmark_models``; ``path`` default: ``paths.step_overhead``, read when
    called) when ``hw`` is the CPU it was measured on, else 0."""
    rec = _overhead_record(hw, path)
    if rec is None:
        return 0.0
    return float(rec.get("null_step_ms", {}).get(optimizer, rec.get("null_step_ms", {}).get("sgd", 0.0)))


def answered_overhead_ms(hw: HardwareSpec, optimizer: str, model: EfficiencyModel, path: str | Path | None = None) -> float:
    """:func:`default_overhead_ms` at the host speed ``model`` answers ``hw`` at (:meth:`EfficiencyModel.speed_factor`)."""
    return default_overhead_ms(hw, optimizer, path) * model.speed_factor(hw)


def predict_trace(
    trace: StepTrace,
    hw: HardwareSpec,
    model: EfficiencyModel,
    *,
    overhead_ms: float = 0.0,
    top: int = 8,
    host: bool = True,
    module_call_ms: float | None = None,
    conv_sequence_share: float | None = None,
) -> tuple[StepPrediction, pl.DataFrame]:
    """The prediction of a traced step on ``hw`` and the per-op table it sums (raises
    :class:`~prenet.steptime.efficiency.UnsupportedPrecisionError` when ``hw`` lacks the trace's precision); ``host``:
    a GPU step as the host issues it (:mod:`prenet.steptime.host`), a CPU step with the host's cost of its module calls
    (``module_call_ms`` each; None: :func:`cpu_module_call_ms`) and its convolutions' in-step share
    (``conv_sequence_share``; None: :func:`cpu_conv_sequence_share`), else the sum of its ops' times."""
    return predict_trace_many(
        trace,
        [hw],
        model,
        overhead_ms=[overhead_ms],
        top=top,
        host=host,
        module_call_ms=None if module_call_ms is None else [module_call_ms],
        conv_sequence_share=None if conv_sequence_share is None else [conv_sequence_share],
    )[0]


def predict_trace_many(
    trace: StepTrace,
    hws: list[HardwareSpec],
    model: EfficiencyModel,
    *,
    overhead_ms: list[float] | None = None,
    top: int = 8,
    host: bool = True,
    module_call_ms: list[float] | None = None,
    conv_sequence_share: list[float] | None = None,
) -> list[tuple[StepPrediction, pl.DataFrame]]:
    """:func:`predict_trace` of one traced step on every hardware of ``hws`` (one device type, the trace's), in one
    batched model call per kind of GPU (:func:`predict_frames`); ``overhead_ms``: per hardware (default 0);
    ``module_call_ms``: a CPU's host cost per module call, per hardware (None: :func:`cpu_module_call_ms`; 0 for a GPU);
    ``conv_sequence_share``: a CPU's convolutions' in-step share, per hardware (None: :func:`cpu_conv_sequence_share`)."""
    frames = predict_frames(trace, hws, model)
    calls = module_call_ms or [cpu_module_call_ms(hw) * model.speed_factor(hw) for hw in hws]
    shares = conv_sequence_share or [cpu_conv_sequence_share(hw, trace.precision) for hw in hws]
    return [
        _summarize(
            trace,
            hw,
            ops,
            ovh,
            top,
            model.host_ms.get(hw.kind, 0.0) if host else 0.0,
            measured=model.measured(hw),
            host_speed=model.host_speeds.get(hw.hardware_id),
            module_call_ms=call if host else 0.0,
            conv_sequence_share=share if host else 0.0,
        )
        for hw, ops, ovh, call, share in zip(hws, frames, overhead_ms or [0.0] * len(hws), calls, shares)
    ]


def predict_frames(trace: StepTrace, hws: list[HardwareSpec], model: EfficiencyModel) -> list[pl.DataFrame]:
    """The per-op predictions of ``trace`` on every hardware of ``hws`` (one batched model call per kind of GPU): an
    ``fp32`` CUDA step's ops as each GPU runs them, with or without TF32 units (:meth:`StepTrace.frame_for`)."""
    if not trace.tf32_by_default:
        return model.predict_many(trace.frame(), hws)
    out: list[pl.DataFrame | None] = [None] * len(hws)
    groups: dict[bool, list[int]] = {}
    for i, hw in enumerate(hws):
        groups.setdefault(hw.peak_tflops("tf32") is not None, []).append(i)
    frame = trace.frame()  # built once, viewed per group
    for tf32, idx in groups.items():
        for i, f in zip(idx, model.predict_many(as_run_on(trace, frame, tf32), [hws[i] for i in idx])):
            out[i] = f
    return out  # type: ignore[return-value]


def _summarize(
    trace: StepTrace,
    hw: HardwareSpec,
    ops: pl.DataFrame,
    overhead_ms: float,
    top: int,
    host_ms: float = 0.0,
    measured: bool = False,
    module_call_ms: float = 0.0,
    conv_sequence_share: float = 0.0,
    host_speed: HostSpeed | None = None,
) -> tuple[StepPrediction, pl.DataFrame]:
    """``host_ms``: a GPU host's cost per issued op, issuing while the GPU runs earlier ops; ``module_call_ms``: a CPU's
    cost per module call (Python and autograd around the ops, which their in-place times leave out), in turn with them;
    ``conv_sequence_share``: how much longer a CPU's convolutions take in the step than in place (a share of their
    predicted time); ``host_speed``: the host speed this CPU's ops were scaled to (:meth:`EfficiencyModel.at_host_speed`),
    which the answer states."""
    total_ms = float(ops.get_column("predicted_ms").sum())
    issued_ops = issued(ops)
    cpu = hw.kind == "cpu"
    host_issue_ms = module_calls(trace.records) * module_call_ms if cpu else float(issued_ops.sum()) * host_ms
    step_ms = total_ms + host_issue_ms if cpu else issue_bound_ms(ops.get_column("predicted_ms").to_numpy(), issued_ops, host_ms)
    conv_ms = float(ops.filter(pl.col("family").str.starts_with("conv"))["predicted_ms"].sum()) * conv_sequence_share if cpu else 0.0
    fam = ops.group_by("family").agg(pl.col("predicted_ms").sum()).sort("predicted_ms", descending=True)
    est = ops.with_columns(pl.col("estimate").str.replace(r":.*", "")).group_by("estimate").agg(pl.col("predicted_ms").sum())
    notes = []
    fallback = ops.filter(is_fallback())
    if note := unit_proxy_note(ops, total_ms):
        notes.append(note)
    if fallback.height:
        kinds = ", ".join(f"{f} ({e})" for f, e in fallback.select("family", "estimate").unique().sort("family").iter_rows())
        notes.append(
            f"{100 * float(fallback['predicted_ms'].sum()) / max(total_ms, 1e-12):.1f} % of the time has no {hw.kind} "
            f"measurements of its own family: {kinds}"
        )
    if note := default_tf32_note(trace, ops):
        notes.append(note)
    if note := power_note(hw, measured=measured):
        notes.append(note)
    if hw.kind == "cpu" and trace.precision == "bf16" and (note := cpu_bf16_note(hw)):
        notes.append(note)
    data_bytes, sensitive = step_data_bytes(trace), cache_sensitive(ops, hw)
    cold = cold_read_bytes(trace, hw)
    # the hardware record's bandwidths are as slow now as the ops (the host speed's factor; 1 unless scaled)
    slow = 1.0 if host_speed is None else host_speed.factor
    refetch_ms = dram_refetch_ms(ops, hw, cold, sensitive) * slow
    llc_ms = llc_refetch_ms(ops, hw, llc_read_bytes(trace, hw, cold), sensitive) * slow
    if llc_ms > 0:
        notes.append(
            f"L2: memory-bound ops that fit one core's {hw.l2_mb:g} MB L2, timed in place at its {hw.l2_bw_gbps:.0f} GB/s, "
            f"read operands last touched further back than it holds from the last-level cache: + {llc_ms:.2f} ms at "
            f"{hw.cache_bw_gbps:.1f} GB/s (measured)"
        )
    if note := cpu_cache_note(ops, hw, refetch_ms, data_bytes, sensitive, activations=bool(trace.activation_bytes), cold=cold):
        notes.append(note)
    if conv_ms > 0:
        notes.append(
            f"convolutions: run one after another in a step they take {100 * conv_sequence_share:.0f} % longer than "
            f"repeated in place, as the op benchmark times them (measured on this CPU in {trace.precision}): + {conv_ms:.2f} ms"
        )
    if hw.kind == "cpu":
        notes.append(CPU_ALLOCATOR_NOTE)
        if measured:
            notes.append(CPU_HOST_SPEED_NOTE if host_speed is None else host_speed.note())
    if host_issue_ms > total_ms and not cpu:
        notes.append(
            f"host-bound: issuing its {int(issued_ops.sum()):,} ops takes {host_issue_ms:.1f} ms at {1e3 * host_ms:.0f} µs each "
            "(PyTorch eager, fitted on measured steps"
            + (
                f"; cuDNN runs the other {len(issued_ops) - int(issued_ops.sum()):,} of the step's {len(issued_ops):,} inside calls "
                "issued once: layout transposes, a backward's second kernel"
                if issued_ops.sum() < len(issued_ops)
                else ""
            )
            + f"), more than the {total_ms:.1f} ms of GPU work; a larger batch, "
            "CUDA graphs or torch.compile would hide it"
        )
    top_rows = ops.sort("predicted_ms", descending=True).head(top).select("op", "family", "phase", "module", "shapes", "predicted_ms", "estimate")
    pred = StepPrediction(
        step_seconds=(step_ms + refetch_ms + llc_ms + conv_ms + overhead_ms) / 1e3,
        hardware=hw.to_dict(),
        optimizer=trace.optimizer,
        precision=trace.precision,
        batch_size=trace.input_shape[0] if trace.input_shape else None,
        input_shape=trace.input_shape,
        params=trace.params,
        overhead_ms=overhead_ms,
        family_ms={f: float(t) for f, t in fam.iter_rows()},
        estimate_share={e: float(t) / max(total_ms, 1e-12) for e, t in est.iter_rows()},
        ops=ops.height,
        notes=notes + trace.notes,
        top_ops=top_rows.to_dicts(),
        fused=trace.fused,
        memory_format=trace.memory_format,
        grad_accum=trace.grad_accum,
        host_issue_ms=host_issue_ms,
        host_bound=host_issue_ms > total_ms,
        dram_refetch_ms=refetch_ms,
        llc_refetch_ms=llc_ms,
        conv_sequence_ms=conv_ms,
        host_speed=None if host_speed is None else asdict(host_speed),
    )
    return pred, ops


def _per_parameter_records(module: nn.Module, op: Any, phase: str, operands: int) -> list:
    """The records of ``op`` on a meta gradient of every trainable parameter (one call each, in registration order,
    the gradient passed ``operands`` times: ``g.add_(g)`` takes 2, ``g.zero_()`` 1), in ``phase``."""
    import torch

    from prenet.ops.trace import trace_call

    out = []
    for p in module.parameters():
        if not p.requires_grad:
            continue
        g = torch.empty_like(p, device="meta")
        for r in trace_call(op, *[g] * operands):
            r.phase = phase
            out.append(r)
    return out


def grad_accumulation_records(module: nn.Module) -> list:
    """The ``grad += new`` of every trainable parameter that a backward adds when gradients already exist (gradient
    accumulation, or a loop without ``zero_grad``), as the ops they are (backward phase)."""
    import torch

    return _per_parameter_records(module, torch.Tensor.add_, "backward", 2)


def zero_grad_records(module: nn.Module) -> list:
    """The ``grad.zero_()`` of every trainable parameter that ``zero_grad(set_to_none=False)`` issues (torch < 2.0's
    default: one fill kernel per parameter, before the forward; the backward then adds into those gradients,
    :func:`grad_accumulation_records`), as the ops they are (forward phase)."""
    import torch

    return _per_parameter_records(module, torch.Tensor.zero_, "forward", 1)


def accumulate(trace: StepTrace, module: nn.Module, k: int) -> StepTrace:
    """One optimizer step of gradient accumulation over ``k`` micro-steps: the traced forward and backward ``k`` times,
    the gradient accumulation of the ``k - 1`` later backwards, one optimizer step (``trace``'s, unchanged for k = 1)."""
    if k < 1:
        raise PrenetError(f"--grad-accum must be a positive integer, got {k}")
    if k == 1:
        return trace
    micro = [r for r in trace.records if r.phase != "optimizer"]
    step = [r for r in trace.records if r.phase == "optimizer"]
    b = trace.input_shape[0] if trace.input_shape else 0
    note = f"gradient accumulation: {k} micro-steps of {b} per optimizer step (effective batch {k * b}); the step time is per optimizer step"
    return replace(trace, records=micro * k + grad_accumulation_records(module) * (k - 1) + step, notes=[*trace.notes, note], grad_accum=k)


#: A CPU op is cache-sensitive when it is memory-bound (under this many FLOPs per byte: a GEMM of a batch of 16 rows
#: through a weight matrix has ~8) and its operands (bytes moved) fit the caches' capacity
#: (:attr:`~prenet.hardware.spec.HardwareSpec.cache_mb`; :data:`CACHE_SENSITIVE_MAX_MB` where a record predates it):
#: the op benchmark times it in place, its operands warm, while inside a step those of its operands that the step
#: evicted since their last use (:func:`cold_read_bytes`) come from DRAM (:func:`dram_refetch_ms`), however small the op. (Measured
#: 2026-12-06, operands evicted by a 256 MB pass first: batch norm and depthwise convolutions of 2 MB ran 1.6-2.2x their
#: in-place time, of 0.2 MB 2.8-4.8x. Until then ops under the L2's size were counted warm; counting them cold moved an
#: unseen MobileNetV3-small's FP32 answer from 18 % too fast to 3 % too slow, the CPU zoo's FP32 rows 7.8 -> 7.2 %
#: MAPE, its BF16 rows unchanged: their steps fit the cache.)
CACHE_SENSITIVE_FLOPS_PER_BYTE = 12.0
CACHE_SENSITIVE_MAX_MB = 12.0
#: Without a measured cache capacity the answer only warns, when such ops hold more than this share of the step.
CACHE_NOTE_SHARE = 0.5
#: Bytes per trainable parameter of each copy a step keeps (FP32 weights, gradients, optimizer state buffers).
PARAM_BYTES = 4


def memory_bound(ops: pl.DataFrame) -> np.ndarray:
    """Which of ``ops`` are memory-bound on a CPU: under ``CACHE_SENSITIVE_FLOPS_PER_BYTE`` FLOPs per byte moved."""
    by = ops.get_column("bytes").to_numpy().astype(float)
    return ops.get_column("flops").to_numpy().astype(float) < CACHE_SENSITIVE_FLOPS_PER_BYTE * by


def cache_sensitive(ops: pl.DataFrame, hw: HardwareSpec) -> np.ndarray:
    """Which of a CPU step's ``ops`` are cache-sensitive (above): a boolean per row (all False on a GPU)."""
    if hw.kind != "cpu" or ops.height == 0:
        return np.zeros(ops.height, dtype=bool)
    top = (hw.cache_mb or CACHE_SENSITIVE_MAX_MB) * 2**20
    return (ops.get_column("bytes").to_numpy().astype(float) <= top) & memory_bound(ops)


def dram_floor_ms(ops: pl.DataFrame, hw: HardwareSpec, cold: np.ndarray, sensitive: np.ndarray) -> np.ndarray:
    """Per op (ms): what a memory-bound op larger than the caches' capacity (so not :func:`cache_sensitive`) adds inside
    a step, where its ``cold`` bytes come from DRAM no faster than ``hw.mem_bw_gbps``: max(0, cold / bandwidth −
    predicted × cold / bytes), the predicted (in-place) time of that share of its bytes being what it already pays.
    Timed in place, such an op still reads much of its data from the caches: the zoo MLP's 12.5 MB SGD updates ran at
    36 GB/s in place and were answered at 54, against 14.4 from DRAM (AMD EPYC, 2026-12-07); 0 elsewhere. Paired on
    the same model and hour: CPU zoo FP32 MAPE 11.65 -> 9.41 % (wide_mlp -14.6 -> -4.6 %, mlp -39 -> -32 %), unseen
    torchvision CNNs at batch 8 (MobileNetV3-large, MobileNetV2, EfficientNet-B0, ResNet-34) each 0.4-1.6 points
    closer (all four under-predicted that hour, by 6-20 %)."""
    by = ops.get_column("bytes").to_numpy().astype(float)
    pred = ops.get_column("predicted_ms").to_numpy().astype(float)
    floor = np.maximum(0.0, cold / (hw.mem_bw_gbps * 1e9) * 1e3 - pred * cold / np.maximum(by, 1.0))
    return np.where(memory_bound(ops) & ~sensitive, floor, 0.0)


#: The gradients the backward writes of the saved activations, as a share of their bytes (one per activation, of its
#: size): live beside them in the cache while the backward reads them back. Counted since 2026-12-06: steps of 40-60
#: MB of weights and saved activations ran as if cold on a host whose copies held 64 MB in cache (in place against
#: whole step, unseen torchvision MobileNetV3-small / ShuffleNetV2 at 64 px, batch 16, FP32: 14.5 / 19.2 ms slower
#: whole, 13.6 / 14.2 ms the cold refetch; MobileNetV2-like BF16 19.7 against 14.1), while an MLP's 42 MB of weights
#: and copies (counted this way), with few activations, stayed warm (0.2 ms)
ACTIVATION_GRAD_SHARE = 1.0
#: An operand stays warm while the distinct data its step touched since its last use (its LRU stack distance,
#: :mod:`prenet.ops.reuse`) is under this share of the caches' measured capacity
#: (:attr:`~prenet.hardware.spec.HardwareSpec.cache_mb`: where a copy loop still runs most of the way to cache speed; a
#: step's allocator churn and temporaries touch more). Per operand since 2026-12-06 (issue 28): until then every
#: memory-bound op of a step whose data outgrew the caches was counted cold, the per-timestep gates of a GRU, reading
#: what the op before them wrote, too (AMD EPYC, 1 thread: gru_tagger +55 -> +6 %, the CPU zoo's FP32 MAPE 14.0 ->
#: 5.8 %; six unseen torchvision CNNs at 64-96 px, timed as the benchmark times, 13.8 -> 14.8 % mean |error|, 11.4 %
#: once batch norms carried their spatial size). The share was set for the whole step's data, measured on two hosts
#: (2026-12-05, 12-13 MB capacity: 9.5 MB of data warm, 18 MB cold; 2026-12-06, 64 MB: an MLP's 42 MB warm, unseen
#: MobileNetV3-small / ShuffleNetV2 steps of 60-61 MB cold, 14-19 ms slower whole than their ops in place, 13-14 ms the
#: cold refetch)
CACHE_FILL_SHARE = 0.8
#: Bytes per parameter a bf16 / fp16 autocast step adds: the 16-bit weight copies its cast cache holds (2) and their
#: 16-bit gradients, which the backward casts into the FP32 ones (2).
CAST_COPY_BYTES = 4


def step_data_bytes(trace: StepTrace) -> float:
    """The data a step touches every time (bytes), the working set its cache note names (the DRAM refetch itself is per
    operand since 2026-12-06, :func:`cold_read_bytes`): its parameters' FP32 weights, gradients and the optimizer's state
    buffers (:data:`~prenet.names.OPTIMIZER_STATE_BUFFERS`; unknown optimizers count none), under autocast the 16-bit
    weight copies and their gradients (:data:`CAST_COPY_BYTES`), and the activations its forward saves for the backward
    (:attr:`~prenet.ops.records.StepTrace.activation_bytes`, where traced), written early and read back late, with the
    gradients the backward writes of them (:data:`ACTIVATION_GRAD_SHARE`). Other activations are left out: made and
    used within a few ops, they stay warm. (A MobileNetV3-small at batch 8, 128²,
    AdamW: 39 MB of parameter data and 41 MB saved; with the saved activations counted its step outgrows a 64 MB cache,
    and the FP32 answer moved from 42 % to 18 % too fast against the measured step, 2026-12-06.)"""
    per = PARAM_BYTES * (2 + OPTIMIZER_STATE_BUFFERS.get(trace.optimizer, 0)) + (CAST_COPY_BYTES if trace.precision in ("bf16", "fp16") else 0)
    return float(trace.params) * per + (1.0 + ACTIVATION_GRAD_SHARE) * float(trace.activation_bytes or 0)


def cold_read_bytes(trace: StepTrace, hw: HardwareSpec) -> np.ndarray | None:
    """Per op of a CPU ``trace``, the bytes it reads from DRAM: the operands that, with the distinct data the step
    touched since their last touch, outgrow :data:`CACHE_FILL_SHARE` of the caches' measured capacity
    (:func:`prenet.ops.reuse.cold_bytes`). None on a GPU, without a measured capacity, or for a trace that notes no
    reads (a GPU trace, a measured one)."""
    if hw.kind != "cpu" or not hw.cache_mb or not any(r.reads for r in trace.records):
        return None
    capacity = CACHE_FILL_SHARE * hw.cache_mb * 2**20
    return np.array([cold_bytes(r.reads, capacity) for r in trace.records], dtype=float)


def dram_refetch_ms(ops: pl.DataFrame, hw: HardwareSpec, cold: np.ndarray | None, sensitive: np.ndarray | None = None) -> float:
    """The time (ms) a CPU step's cache-sensitive ops (:func:`cache_sensitive`) spend reading from DRAM, at its measured
    bandwidth, the operands they last touched further back than its caches hold (``cold``: bytes per op,
    :func:`cold_read_bytes`), on top of their in-place times. Additive, not overlapped: one thread packs a GEMM's
    operand before it computes on it (measured on an Intel Xeon, 2026-12-05: the skinny GEMMs of a 784-1024-1024-1024-10
    MLP at batch 16 took 0.20-0.36 ms more after a 64 MB eviction than in place, 3.3-4.3 MB each; on an AMD EPYC,
    2026-12-06, 0.31-0.43 ms). Memory-bound ops larger than the caches add their DRAM floor (:func:`dram_floor_ms`).
    0 on a GPU, or where ``cold`` is None. ``sensitive``: :func:`cache_sensitive` of ``ops``; ``ops`` carry
    ``predicted_ms``."""
    if hw.kind != "cpu" or cold is None:
        return 0.0
    sel = cache_sensitive(ops, hw) if sensitive is None else sensitive
    return float(cold[sel].sum() / (hw.mem_bw_gbps * 1e9) * 1e3 + dram_floor_ms(ops, hw, cold, sel).sum())


def llc_read_bytes(trace: StepTrace, hw: HardwareSpec, cold: np.ndarray | None) -> np.ndarray | None:
    """Per op of a CPU ``trace``, the bytes it reads from the last-level cache: the operands that, with the distinct
    data the step touched since their last touch, outgrow :data:`CACHE_FILL_SHARE` of one core's L2, less those that
    come from DRAM (``cold``: :func:`cold_read_bytes` of the same trace and hardware). None where the roofline is not at
    the L2's speed (no measured L2 bandwidth), on a GPU, or without ``cold``."""
    if cold is None or not hw.l2_bw_gbps or not hw.l2_mb:
        return None
    l2 = CACHE_FILL_SHARE * hw.l2_mb * 2**20
    return np.array([cold_bytes(r.reads, l2) for r in trace.records], dtype=float) - cold


def llc_refetch_ms(ops: pl.DataFrame, hw: HardwareSpec, llc: np.ndarray | None, sensitive: np.ndarray) -> float:
    """The time (ms) a CPU step's cache-sensitive ops that fit one core's L2 (timed in place, their operands stayed
    there, at the roofline's L2 bandwidth) spend reading from the last-level cache, at its measured bandwidth, the
    operands last touched further back than L2 holds (``llc``: bytes per op, :func:`llc_read_bytes`). Additive, as the
    DRAM refetch (:func:`dram_refetch_ms`). On an Intel Xeon whose L2 runs at ~150 GB/s and L3 at ~30 (2026-12-07):
    an MLP's Adam updates, 1-4 MB a tensor, ran from L2 in place and from L3 in the step. 0 where ``llc`` is None."""
    if llc is None or not hw.cache_bw_gbps:
        return 0.0
    small = ops.get_column("bytes").to_numpy().astype(float) <= hw.l2_mb * 2**20
    return float(llc[sensitive & small].sum() / (hw.cache_bw_gbps * 1e9) * 1e3)


#: What every CPU answer assumes of the host's allocator, said with it: the op benchmark and the zoo steps are timed
#: with freed memory kept in the process (prenet.measurement.allocator, as PyTorch's GPU caching allocators keep it), so
#: the answer is the ops' time. Under glibc's default malloc a step returns its large freed buffers to the OS and
#: page-faults them back in on the next: torchvision's MobileNetV3-large at batch 8 on one thread of this AMD EPYC took
#: 851-1,002 ms a step so (4 runs), 630-714 ms with memory kept or with the two variables below, 2026-12-07 (the
#: answers to it: docs/step_time.md).
CPU_ALLOCATOR_NOTE = (
    "allocator: timed with freed memory kept in the process (as PyTorch's GPU caching allocator keeps it); under "
    "glibc's default malloc a CPU step page-faults its large buffers back in every step and runs slower: train with "
    "MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 set (or under jemalloc/tcmalloc) to run at "
    "the answered speed"
)
#: said with every answer for a CPU whose own op benchmark trained the model: the answer is at the speed the host had
#: then, which a shared VM does not keep (docs/step_time.md, "A local answer is at the op benchmark's host speed")
CPU_HOST_SPEED_NOTE = (
    "host speed: answered at the speed this CPU had while the op benchmark timed its ops; a shared VM's speed drifts "
    "(a 2-core cloud host here ran 1.2× slower hours later, its caches up to 1.5×): `dvc repro -f -s benchmark_ops` "
    "then `dvc repro` re-times it"
)


def cpu_cache_note(
    ops: pl.DataFrame,
    hw: HardwareSpec,
    refetch_ms: float = 0.0,
    data_bytes: float = 0.0,
    sensitive: np.ndarray | None = None,
    activations: bool = False,
    cold: np.ndarray | None = None,
) -> str | None:
    """What the answer says of a CPU step's caches: the DRAM refetch it added (:func:`dram_refetch_ms`; ``cold``: the
    bytes per op it counted), or, without a measured cache capacity, a warning where cache-sensitive ops hold most of
    the step (they ran up to ~1.5× slower inside a step than timed in place). None for GPUs and other steps.
    ``sensitive``: :func:`cache_sensitive` of ``ops``, if known."""
    if hw.kind != "cpu" or ops.height == 0:
        return None
    sel = cache_sensitive(ops, hw) if sensitive is None else sensitive
    acts = " and saved activations with their gradients" if activations else ""
    if refetch_ms > 0 and cold is not None:
        big = dram_floor_ms(ops, hw, cold, sel) > 0
        larger = f", and {int(big.sum())} larger ones read {cold[big].sum() / 2**20:.1f} MB no faster than DRAM" if big.any() else ""
        return (
            f"cache: {int((sel & (cold > 0)).sum())} memory-bound ops, timed in place with warm operands, read "
            f"{cold[sel].sum() / 2**20:.1f} MB last touched further back than {CACHE_FILL_SHARE:.0%} of the "
            f"{hw.cache_mb:.0f} MB its caches hold (measured; the step's weights, gradients, optimizer state{acts}: "
            f"{data_bytes / 2**20:.0f} MB) and fetch them from DRAM{larger}: + {refetch_ms:.2f} ms at "
            f"{hw.mem_bw_gbps:.1f} GB/s"
        )
    if hw.cache_mb:
        return None
    t = ops.get_column("predicted_ms").to_numpy()
    share = float(t[sel].sum() / max(t.sum(), 1e-12))
    if share <= CACHE_NOTE_SHARE:
        return None
    return (
        f"cache: {100 * share:.0f} % of this step's predicted time is in memory-bound ops of up to "
        f"{CACHE_SENSITIVE_MAX_MB:g} MB, timed with their operands warm in the cache; inside a step they come from DRAM, "
        "and a step like it (a 784-1024-1024-1024-10 MLP at batch 16) ran 1.5x slower than predicted: read this as a "
        "lower bound (docs/hardware.md; this CPU's record predates the measured cache capacity)"
    )


#: Where torch's default fp32 runs cuDNN's convolutions on a GPU with TF32 units (the notes of ``predict`` and ``plan``).
CUDNN_TF32_DEFAULT = "on TF32 tensor cores (torch.backends.cudnn.allow_tf32 is True by default)"


def tf32_default_ops(trace: StepTrace, ops: pl.DataFrame) -> int:
    """How many of ``ops`` (the predicted frame of ``trace`` on one GPU) an ``fp32`` step runs on TF32 units by torch's
    defaults (0 for any other precision or device, and on a GPU without TF32 units)."""
    return int(ops.filter((pl.col("unit") == "tf32") & (pl.col("dtype") == "float32")).height) if trace.tf32_by_default else 0


def is_fallback() -> pl.Expr:
    """Ops answered without measurements of their own family on that device kind (``estimate`` neither ``model`` nor
    ``unit:<unit>``, the family's own model through a sibling unit's kernels)."""
    return (pl.col("estimate") != "model") & ~pl.col("estimate").str.starts_with("unit:")


def unit_proxy_note(ops: pl.DataFrame, total_ms: float) -> str | None:
    """What share of the step was answered through a sibling unit's kernels (``estimate`` ``unit:<sibling>``, or
    ``analogy:<family>+unit:<sibling>``: :data:`~prenet.steptime.efficiency.UNIT_PROXY`), for which families and
    units; None where none was."""
    proxied = ops.filter(pl.col("estimate").str.contains("unit:", literal=True))
    if not proxied.height:
        return None
    kinds = ", ".join(
        f"{f} in {u.upper()} (as {e.split('unit:', 1)[1].upper()})"
        for f, u, e in proxied.select("family", "unit", "estimate").unique().sort("family").iter_rows()
    )
    share = 100 * float(proxied["predicted_ms"].sum()) / max(total_ms, 1e-12)
    return (
        f"{share:.1f} % of the time is of ops whose unit their model saw too few measurements of: {kinds}, answered at "
        "the efficiency the model gives the same ops on the sibling unit's tensor-core kernels, against their own roofline"
    )


def default_tf32_note(trace: StepTrace, ops: pl.DataFrame) -> str | None:
    """What an ``fp32`` step runs on a GPU with TF32 units, by torch's defaults (None elsewhere)."""
    n = tf32_default_ops(trace, ops)
    if not n:
        return None
    return (
        f"fp32 as torch runs it by default: its {n:,} cuDNN ops (convolutions) {CUDNN_TF32_DEFAULT}, "
        "NCHW ones between cuDNN's layout transposes; "
        "GEMMs in IEEE FP32 (--precision tf32 puts them on TF32 too; a job that sets allow_tf32 = False runs slower than this)"
    )


def cpu_bf16_note(hw: HardwareSpec) -> str | None:
    """How ``hw`` (a CPU) runs BF16, as its detection found it: native units or conversion, and the measured GEMM peaks
    the answer's BF16 ops are scaled by."""
    if not hw.peak_bf16_tflops:
        return None
    units = hw.extra.get("bf16_units")
    how = {
        "amx_bf16": "native BF16 units (AMX tiles)",
        "avx512_bf16": "native BF16 dot products (AVX512-BF16)",
        "bf16": "native BF16 instructions (Arm BF16)",
        "none": "no native BF16 units (neither AVX512-BF16 nor AMX): "
        + (
            "oneDNN converts to FP32"
            if int(hw.extra.get("simd_bits", 512)) >= 512
            else "without AVX-512 torch does not hand BF16 GEMMs to oneDNN, and ATen's reference loops run them at a "
            "speed set by the operands' layout (on an AMD EPYC, 2026-12-06: 0.5-2.8 GFLOP/s with both operands "
            "row-major, as a Linear's input gradient, 4-10 with the second transposed, 14-17 with the first)"
        ),
    }.get(str(units), "BF16 units not recorded (re-run `dvc repro benchmark` to detect them)")
    return (
        f"bf16 on {hw.hardware_id}: {how}; its BF16 GEMMs were measured at {hw.peak_bf16_tflops:.2f} TFLOP/s "
        f"against {hw.peak_fp32_tflops:.2f} in FP32 ({hw.peak_bf16_tflops / hw.peak_fp32_tflops:.1f}×)"
    )


def predict_step(
    module: nn.Module,
    example_batch: Any,
    *,
    hardware: HardwareSpec,
    model: EfficiencyModel,
    optimizer: str = "sgd",
    precision: str = "fp32",
    overhead_ms: float | None = None,
    dataset_size: int | None = None,
    fused: bool = False,
    memory_format: str = "contiguous",
    grad_accum: int = 1,
    threads: int = 1,
) -> StepPrediction:
    """Trace one training step of ``module`` for ``hardware``'s device type and precision, and predict it.
    ``overhead_ms`` None: the measured null step of the local CPU (:func:`default_overhead_ms`); ``fused``: the
    optimizer as ``torch.optim.*(fused=True)`` runs it; ``memory_format``: contiguous (NCHW) or channels_last (NHWC);
    ``grad_accum``: K micro-steps of the batch per optimizer step (:func:`accumulate`); ``threads``: the CPU threads a
    CPU step runs on."""
    from prenet.ops.trace import trace_step  # torch: only to trace (a stored trace is predicted without it)

    trace = trace_step(
        module,
        example_batch,
        optimizer=optimizer,
        precision=precision,
        device_type=device_type(hardware),
        fused=fused,
        memory_format=memory_format,
        threads=threads,
    )
    return predict_traced(accumulate(trace, module, grad_accum), hardware, model, overhead_ms=overhead_ms, dataset_size=dataset_size)


def predict_traced(
    trace: StepTrace, hardware: HardwareSpec, model: EfficiencyModel, *, overhead_ms: float | None = None, dataset_size: int | None = None
) -> StepPrediction:
    """:func:`predict_step` of a step already traced (gradient accumulation applied): the step plus ``overhead_ms``
    (None: the measured null step of the local CPU), and the epoch of ``dataset_size`` samples when given."""
    ovh = answered_overhead_ms(hardware, trace.optimizer, model) if overhead_ms is None else overhead_ms
    pred, _ = predict_trace(trace, hardware, model, overhead_ms=ovh)
    set_epoch(pred, trace, dataset_size)
    return pred


def set_epoch(pred: StepPrediction, trace: StepTrace, dataset_size: int | None, replicas: int = 1) -> None:
    """``pred``'s steps and seconds per epoch of ``dataset_size`` samples (none when not given), an optimizer step
    holding ``batch × grad_accum × replicas`` samples (``replicas``: data-parallel GPUs)."""
    if dataset_size is not None and pred.batch_size:
        pred.steps_per_epoch = math.ceil(dataset_size / (pred.batch_size * trace.grad_accum * replicas))
        pred.epoch_seconds = pred.steps_per_epoch * pred.step_seconds
