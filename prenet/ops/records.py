"""What a trace holds: one :class:`OpRecord` per ATen op of a training step, and the :class:`StepTrace` of the whole
step (no torch here: a stored trace is predicted without importing it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from prenet.ops.families import LAYOUT_TRANSPOSES, unit_of


@dataclass
class OpRecord:
    """One ATen op of a training step. ``flops`` in FLOPs, ``bytes`` moved, ``measured_ms`` per call (measured
    traces only); ``unit`` is the arithmetic unit its FLOPs run on (fp32 | tf32 | fp16 | bf16)."""

    op: str
    family: str
    phase: str
    module: str
    flops: float
    bytes: int
    dtype: str
    unit: str
    batch: int = 0
    m: int = 0
    n: int = 0
    k: int = 0
    groups: int = 1
    out_numel: int = 0
    #: GEMM operand layout: 1 if the first operand is transposed in memory (last stride ≠ 1), + 2 if the second is
    layout: int = 0
    shapes: str = ""
    out_shapes: str = ""
    strides: str = ""
    measured_ms: float | None = None
    spread_rel: float | None = None
    #: what the op reads, as ``[bytes, distance]`` pairs: the distinct bytes the step touched since each operand's last
    #: touch (:func:`prenet.ops.reuse.read_distances`); empty where not noted (GPU traces, measured ones, external kernels)
    reads: list = field(default_factory=list)


@dataclass
class StepTrace:
    """The ops of one training step and what they were traced from."""

    records: list[OpRecord]
    precision: str
    optimizer: str
    device_type: str
    input_shape: list[int]
    params: int
    notes: list[str] = field(default_factory=list)
    fused: bool = False  # the optimizer step as one fused kernel (``torch.optim.*(fused=True)``), else foreach / per tensor
    memory_format: str = "contiguous"  # of the 4-D tensors (:data:`~prenet.names.MEMORY_FORMATS`)
    grad_accum: int = 1  # micro-steps (forward + backward) per optimizer step (:func:`prenet.steptime.step.accumulate`)
    #: The trainable parameters in registration order, as [name of the module that owns it (as the records name
    #: modules), elements]: when each gradient is ready in the backward pass (data-parallel buckets, :mod:`prenet.parallel`).
    grad_params: list[list[Any]] = field(default_factory=list)
    #: The repeated transformer blocks (module names, as the records name modules) and their attention heads: what
    #: tensor parallelism splits (:func:`prenet.ops.trace.attention_blocks`); empty / None for other models.
    blocks: list[str] = field(default_factory=list)
    heads: int | None = None
    #: The bytes autograd saves for the backward pass in one forward (:func:`prenet.memory.training.trace_saved`): data a
    #: step writes early and reads back late, so it counts towards a CPU step's working set
    #: (:func:`prenet.steptime.step.step_data_bytes`); None where not traced (GPU steps, or a forward that cannot run on
    #: ``meta`` at this precision; measured traces; layer traces that time one direction).
    activation_bytes: int | None = None

    def frame(self) -> pl.DataFrame:
        """One row per op (columns of :class:`OpRecord`)."""
        # columns straight from the attributes (dataclasses.asdict deep-copies every record: ~70 ms of a ResNet-50 answer)
        return pl.DataFrame({c: [getattr(r, c) for r in self.records] for c in OP_SCHEMA}, schema=OP_SCHEMA)

    @property
    def tf32_by_default(self) -> bool:
        """An ``fp32`` step traced for a GPU: torch runs its cuDNN ops (:data:`~prenet.ops.families.CUDNN_TF32_FAMILIES`)
        on TF32 tensor cores by default where the GPU has them, so its ops depend on the GPU (:meth:`frame_for`)."""
        return self.precision == "fp32" and self.device_type == "cuda"

    def frame_for(self, tf32: bool) -> pl.DataFrame:
        """:meth:`frame` as the step runs on a GPU with (``tf32``) or without TF32 tensor cores (:func:`as_run_on`)."""
        return as_run_on(self, self.frame(), tf32)


def as_run_on(trace: StepTrace, frame: pl.DataFrame, tf32: bool) -> pl.DataFrame:
    """``frame`` (``trace``'s :meth:`~StepTrace.frame`) as the step runs on a GPU with (``tf32``) or without TF32 tensor
    cores. Only an ``fp32`` CUDA step differs (:attr:`~StepTrace.tf32_by_default`; its trace records the layout
    transposes of its FP32 convolutions): with TF32, its FP32 cuDNN ops run on the TF32 units, between those transposes,
    as FP16 ones do; without, they run on the FP32 units in NCHW, and the transposes are not run."""
    if not trace.tf32_by_default:
        return frame
    fp32 = pl.col("dtype") == "float32"  # a model.half() step traced at fp32 keeps its FP16 ops and their transposes
    if not tf32:
        return frame.filter(~(pl.col("op").is_in(list(LAYOUT_TRANSPOSES)) & fp32))
    units = {f"{f}|{d}": unit_of(f, d, "fp32", cudnn_tf32=True) for f, d in frame.select("family", "dtype").unique().iter_rows()}
    return frame.with_columns(pl.concat_str("family", "dtype", separator="|").replace_strict(units, default=pl.col("unit")).alias("unit"))


OP_SCHEMA = {
    "op": pl.String,
    "family": pl.String,
    "phase": pl.String,
    "module": pl.String,
    "flops": pl.Float64,
    "bytes": pl.Int64,
    "dtype": pl.String,
    "unit": pl.String,
    "batch": pl.Int64,
    "m": pl.Int64,
    "n": pl.Int64,
    "k": pl.Int64,
    "groups": pl.Int64,
    "out_numel": pl.Int64,
    "layout": pl.Int64,
    "shapes": pl.String,
    "out_shapes": pl.String,
    "strides": pl.String,
    "measured_ms": pl.Float64,
    "spread_rel": pl.Float64,
}


def module_calls(records: list[OpRecord]) -> int:
    """The module calls of a step that issue ops, as its trace shows them: the distinct modules its forward ops ran in
    (ops outside any module, ``(top)``, not counted). The host's Python and autograd cost of a CPU step grows with them
    (:func:`prenet.measurement.models.module_call_ms`), not with the ATen ops a fused C++ loop issues (a GRU's
    per-timestep ops run in one module call)."""
    return len({r.module for r in records if r.phase == "forward" and r.module != "(top)"})
