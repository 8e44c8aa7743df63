"""Trace one whole training step — forward, loss, backward, optimizer step — at the ATen level.

``trace_step`` runs the step on the ``meta`` device (shapes only: no weight memory, no compute) under a
``TorchDispatchMode`` and records every op that moves data: its name, family, phase (forward | backward |
optimizer), the module it ran in, FLOPs, bytes, dtype and GEMM view. ``measure_step`` runs the same step on real
CPU tensors and also times every op in place (the op benchmark's ground truth). Views, allocations and host-side
scalar bookkeeping (an optimizer's step counter) are not ops of the step and are not recorded.

Precision (``PRECISIONS``): ``fp32`` FP32 as torch runs it by default (on a GPU with TF32 units, cuDNN's convolutions
on them, GEMMs in IEEE FP32: :meth:`~prenet.ops.records.StepTrace.frame_for`); ``tf32`` FP32 tensors with
GEMMs and convolutions on TF32 tensor cores; ``fp16``/``bf16`` autocast (torch's op lists, :mod:`prenet.ops.autocast`) with FP32 master weights;
``fp16`` adds the GradScaler's unscale and inf check of every gradient.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from prenet import cpu_dispatch
from prenet.errors import PrenetError
from prenet.meta_device import without_compiler_imports
from prenet.names import AUTOCAST_PRECISIONS, DIRECTIONS, FUSED_OPTIMIZERS, MEMORY_FORMATS, OPTIMIZERS, PRECISIONS
from prenet.ops.accounting import (
    conv_groups,
    gemm_view,
    moved_bytes,
    nbytes,
    op_flops,
    read_args,
    rnn_workspace_bytes,
    tensors,
    unread_bytes,
    written_args,
)
from prenet.ops.autocast import Autocast
from prenet.ops.families import (
    DEPTHWISE_BRGEMM,
    FREE,
    LAYOUT_TRANSPOSES,
    NATIVE_CONV,
    TENSOR_CORE_UNITS,
    base_name,
    family_of,
    unit_of,
)
from prenet.ops.records import OpRecord, StepTrace
from prenet.ops.reuse import Touch, read_distances
from prenet.optimizers import STEP_WEIGHT_DECAY, make_optimizer, prime_state

#: The 16-bit dtype of each autocast precision (:data:`~prenet.names.AUTOCAST_PRECISIONS`).
LOW_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}
assert set(LOW_DTYPE) == set(AUTOCAST_PRECISIONS), "one dtype for each autocast precision of prenet.names"
_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64"}


def _stride_text(args: tuple) -> str:
    return ", ".join("x".join(str(int(v)) for v in t.stride()) or "scalar" for t in tensors(list(args))[:4])


def _shape_text(args: Any) -> str:
    shown = [f"{'x'.join(str(int(s)) for s in t.shape) or 'scalar'}" for t in tensors(list(args) if isinstance(args, tuple) else args)[:4]]
    return ", ".join(shown)


class _Labels(TorchFunctionMode):
    """Maps every autograd node created inside a module's forward to that module's path, so backward ops carry it."""

    def __init__(self, tracer: "_Tracer") -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        where = self.tracer.where()
        stack = [t.grad_fn for t in tensors(out) if t.grad_fn is not None]
        nodes = self.tracer.node_module
        while stack:
            node = stack.pop()
            if node is None or node in nodes:
                continue
            nodes[node] = where
            stack.extend(n for n, _ in node.next_functions)
        return out


def fused_attention(
    device_type: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as the kernel torch picks on a real device (on ``meta`` it decomposes into
    its math: more GEMMs, the L×L scores in memory, FP32 on a CPU): on a CPU the flash kernel for CPUs, but the math
    when ``dropout_p`` > 0 (torch's CPU flash kernel takes no dropout: ``torch._fused_sdp_choice`` answers math, and a
    training step of ``nn.TransformerEncoderLayer``, dropout 0.1, runs ``bmm``, ``bernoulli_`` and ``mul`` there);
    on CUDA flash attention for FP16/BF16 without a mask, else memory-efficient attention. Their backward ops follow
    through autograd."""
    aten = torch.ops.aten
    math = device_type == "cpu" and float(dropout_p) > 0
    if math or enable_gqa or query.shape[-3:-2] != key.shape[-3:-2]:
        return _SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if device_type == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, float(dropout_p), bool(is_causal), attn_mask=attn_mask, scale=scale
        )[0]
    if query.dtype in (torch.float16, torch.bfloat16) and attn_mask is None:
        return aten._scaled_dot_product_flash_attention(query, key, value, float(dropout_p), bool(is_causal), scale=scale)[0]
    return aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, True, float(dropout_p), bool(is_causal), scale=scale)[0]


_SDPA = nn.functional.scaled_dot_product_attention


def mkldnn_lstm(
    input: torch.Tensor, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool
) -> Any:
    """``_VF.lstm`` as a CPU runs it (one fused oneDNN ``mkldnn_rnn_layer`` per layer and direction; on ``meta`` the
    LSTM would decompose into per-timestep products and gates). None where the CPU would not use oneDNN either
    (projections, packed sequences)."""
    d = 2 if bidirectional else 1
    stride = 4 if has_biases else 2
    if not isinstance(hx, (list, tuple)) or len(params) != stride * num_layers * d or params[1].shape[-1] != hx[0].shape[-1]:
        return None
    h0, c0 = hx
    hidden = int(h0.shape[-1])
    x = input.transpose(0, 1) if batch_first else input
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for k in range(d):
            i = layer * d + k
            w = params[i * stride : (i + 1) * stride]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (torch.zeros(4 * hidden, device=x.device), torch.zeros(4 * hidden, device=x.device))
            out, hy, cy, _ = torch.ops.aten.mkldnn_rnn_layer(
                x, w[0], w[1], b_ih, b_hh, h0[i], c0[i], k == 1, [], 2, hidden, 1, has_biases, bidirectional, False, train
            )
            outs.append(out)
            hs.append(hy)
            cs.append(cy)
        x = outs[0] if d == 1 else torch.cat(outs, -1)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(hs), torch.stack(cs)


def cpu_gru(
    input: torch.Tensor, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool
) -> Any:
    """``_VF.gru`` as a CPU runs it (ATen's ``RNN.cpp``: no oneDNN kernel for a GRU): per layer and direction the input
    projection of the whole sequence first, one ``linear`` (``FullLayer``'s ``pre_compute_input``, taken only where
    ``input.device().is_cpu()``, so never on ``meta``, where each timestep would project its own input: twice the
    per-step GEMMs), then per timestep ``GRUCell``: the hidden projection and the gates' in-place ops; the reverse
    direction walks the steps backwards. None where the CPU takes another path (packed sequences)."""
    d = 2 if bidirectional else 1
    stride = 4 if has_biases else 2
    if not isinstance(hx, torch.Tensor) or len(params) != stride * num_layers * d:
        return None
    x = input.transpose(0, 1) if batch_first else input
    hs = []
    for layer in range(num_layers):
        outs = []
        for k in range(d):
            i = layer * d + k
            w = params[i * stride : (i + 1) * stride]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            steps = list(torch.nn.functional.linear(x, w[0], b_ih).unbind(0))
            h = hx[i]
            out = []
            for xw in reversed(steps) if k == 1 else steps:
                ig = xw.unsafe_chunk(3, 1)
                hg = torch.nn.functional.linear(h, w[1], b_hh).unsafe_chunk(3, 1)
                r = hg[0].add_(ig[0]).sigmoid_()
                z = hg[1].add_(ig[1]).sigmoid_()
                n = ig[2].add(hg[2].mul_(r)).tanh_()
                h = (h - n).mul_(z).add_(n)
                out.append(h)
            outs.append(torch.stack(out[::-1] if k == 1 else out, 0))
            hs.append(h)
        x = outs[0] if d == 1 else torch.cat(outs, -1)
        if dropout > 0 and train and layer < num_layers - 1:
            x = torch.nn.functional.dropout(x, dropout, train)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(hs, 0)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[-1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def conv_runs_natively(x: torch.Tensor, weight: torch.Tensor, stride: Any, dilation: Any, groups: int, threads: int) -> bool:
    """Whether torch runs this CPU convolution natively on ``threads`` threads (FP32 only:
    :func:`prenet.cpu_dispatch.native_conv`); a 1-D one runs as the 2-D convolution of height 1."""
    if x.dtype != torch.float32 or x.dim() not in (3, 4) or weight.dim() != x.dim():
        return False
    kernel = (int(weight.shape[-2]) if weight.dim() == 4 else 1, int(weight.shape[-1]))
    strided, dilated = _pair(stride) != (1, 1), _pair(dilation) != (1, 1)
    return cpu_dispatch.native_conv(int(x.shape[0]), x.numel(), kernel, strided=strided, dilated=dilated, groups=int(groups), threads=threads)


def _native_conv_call(name: str, args: tuple, out: Any, groups: int, threads: int | None) -> tuple[tuple[int, int, int, int], int] | None:
    """For a ``convolution`` call (its result ``out``) or ``convolution_backward`` call that torch runs natively on a
    CPU of ``threads`` threads (:func:`conv_runs_natively`): its per-sample GEMM view (batch N, m C_out, n H_out·W_out, k
    C_in·kh·kw) and the bytes it moves beyond reading its weight once and writing its gradient once (each of the N
    per-sample GEMMs reads the weight: forward N reads in all; backward N reads for the input gradient, and N reads and
    writes of the accumulated weight gradient, each where the output mask forms it). None for any other call, a
    transposed convolution, or when ``threads`` is None (not a CPU step)."""
    if threads is None or name not in ("convolution", "convolution_backward"):
        return None
    # convolution(input, weight, bias, stride, padding, dilation, ...) -> out;
    # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, ...)
    forward = name == "convolution"
    x, w, o, stride, dilation, transposed = (
        (args[0], args[1], out, args[3], args[5], args[6]) if forward else (args[1], args[2], args[0], args[4], args[6], args[7])
    )
    if transposed or not isinstance(o, torch.Tensor) or not conv_runs_natively(x, w, stride, dilation, groups, threads):
        return None
    n = int(x.shape[0])
    view = n, int(w.shape[0]), math.prod(int(v) for v in o.shape[2:]), math.prod(int(v) for v in w.shape[1:])
    if forward:
        return view, (n - 1) * nbytes(w)
    mask = args[10] if len(args) > 10 else (True, True, True)  # which of the input, weight, bias gradients it forms
    return view, ((n - 1) * bool(mask[0]) + (2 * n - 1) * bool(mask[1])) * nbytes(w)


def _brgemm_depthwise_call(name: str, args: tuple, dtype: str) -> bool:
    """Whether a CPU depthwise ``convolution_backward`` call of operands ``dtype`` forms its input gradient by oneDNN's
    batch-reduce GEMM (:func:`prenet.cpu_dispatch.brgemm_depthwise_backward`)."""
    if name != "convolution_backward":
        return False
    # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    # groups, output_mask)
    mask = args[10] if len(args) > 10 else (True, True, True)
    strided = any(int(v) != 1 for v in (args[4] if isinstance(args[4], (tuple, list)) else (args[4],)))
    return cpu_dispatch.brgemm_depthwise_backward(dtype, depthwise=True, strided=strided, input_grad=bool(mask[0]))


class _FusedAttention(TorchFunctionMode):
    """Routes every ``scaled_dot_product_attention`` of a meta trace to :func:`fused_attention`: calls made directly
    (this mode) and calls made inside torch's Python composites such as ``F.multi_head_attention_forward`` (which the
    mode cannot see: ``torch.nn.functional.scaled_dot_product_attention`` is replaced for the duration of the trace).
    On a CPU an LSTM runs as oneDNN's fused layer (:func:`mkldnn_lstm`) and a GRU as ATen's CPU loop (:func:`cpu_gru`),
    as they do on a real CPU."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type = device_type

    def __enter__(self):
        nn.functional.scaled_dot_product_attention = lambda *a, **k: fused_attention(self.device_type, *a, **k)
        return super().__enter__()

    def __exit__(self, *exc):
        nn.functional.scaled_dot_product_attention = _SDPA
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "scaled_dot_product_attention":
            return fused_attention(self.device_type, *args, **(kwargs or {}))
        if name == "lstm" and self.device_type == "cpu" and not kwargs and len(args) == 9 and isinstance(args[1], (list, tuple)):
            out = mkldnn_lstm(*args)
            if out is not None:
                return out
        # gru(input, hx, params, ...); a packed sequence's gru(data, batch_sizes, hx, params, ...) has 9 arguments too
        if (
            name == "gru"
            and self.device_type == "cpu"
            and not kwargs
            and len(args) == 9
            and isinstance(args[1], torch.Tensor)
            and isinstance(args[2], (list, tuple))
        ):
            out = cpu_gru(*args)
            if out is not None:
                return out
        return func(*args, **(kwargs or {}))


#: ATen ops (after decomposition) that autocast runs in FP16/BF16 on both device types: the dispatch-level safety net of
#: the meta emulation, for products called inside Python composites the function-level lists cannot see
#: (``F.multi_head_attention_forward``'s projections, for one).
_LOW_ATEN = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "_grouped_mm",
        "convolution",
        "_convolution",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_thnn_fused_lstm_cell",
        "_thnn_fused_gru_cell",
    }
)


class _Tracer(TorchDispatchMode):
    def __init__(self, *, precision: str, meta: bool, names: dict[int, str], timing: dict | None) -> None:
        super().__init__()
        self.precision = precision
        self.meta = meta
        self.low = LOW_DTYPE.get(precision) if meta else None  # dispatch-level autocast (meta traces only)
        self._casts: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.names = names
        self.timing = timing
        self.phase = "forward"
        self.stack: list[str] = []
        self.node_module: dict[Any, str] = {}
        self.records: list[OpRecord] = []
        #: the storages each op touches, (record, storage, bytes, read) in order, noted where ``reuse`` (a CPU step's
        #: answer needs its reads' reuse distances, :mod:`prenet.ops.reuse`; a GPU's does not: 0.1-0.3 s a large model)
        self.reuse = False
        self.touches: list[Touch] = []
        #: every storage a touch keys (its StorageImpl's address), held until ``finish``: a freed one's address, reused
        #: by a later storage at a point that moves with the heap, made two traces of one step alias differently
        self._alive: list = []
        #: cuDNN's layout transposes around tensor-core (FP16/BF16/TF32) convolutions on NCHW tensors (set for CUDA traces)
        self.conv_transposes = False
        #: an ``fp32`` step traced for any GPU: its FP32 convolutions' transposes are recorded too, as the ones a GPU
        #: with TF32 units runs (:meth:`~prenet.ops.records.StepTrace.frame_for` drops them for one without)
        self.tf32_transposes = False
        #: an ``fp32`` step measured on a GPU with TF32 units: its cuDNN ops ran on them (torch's defaults)
        self.cudnn_tf32 = False
        #: a convolution's backward as cuDNN runs it (set for CUDA traces): backward-data and backward-filter (with the
        #: bias gradient) are separate kernels, recorded as two ops the way DeepBench times them; oneDNN's CPU backward
        #: stays the one op the CPU benchmark times
        self.split_conv_backward = False
        #: a channels_last step: convolutions give NHWC results, as cuDNN and oneDNN do for NHWC inputs (the meta kernel
        #: gives NCHW for some, e.g. a 3-channel input)
        self.channels_last = False
        #: the CPU threads of a CPU step (None for a GPU's): some FP32 convolutions run natively, not with oneDNN, on
        #: one thread (:func:`conv_runs_natively`), and are recorded as their own family (:data:`~prenet.ops.families.NATIVE_CONV`)
        self.cpu_threads: int | None = None

    def _to_low(self, a: Any) -> Any:
        """An FP32 tensor argument of a low-precision op, cast as autocast casts it (once per tensor per step), the cast
        recorded as the op it is."""
        if not (isinstance(a, torch.Tensor) and a.dtype == torch.float32):
            return a
        hit = self._casts.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        low = a.to(self.low)
        self._casts[id(a)] = (a, low)
        module = self.where()
        self.records.append(
            OpRecord(
                op="_to_copy",
                family="copy",
                phase=self.phase,
                module=module,
                flops=float(a.numel()),
                bytes=nbytes(a) + nbytes(low),
                dtype=_DTYPE_NAMES[self.low],
                unit="fp32",
                out_numel=int(a.numel()),
                shapes=_shape_text((a,)),
            )
        )
        self._touch(len(self.records) - 1, [a], [low])
        return low

    def where(self) -> str:
        """The module path of the op running now."""
        if self.phase == "backward":
            node = torch._C._current_autograd_node()
            return self.node_module.get(node, "(backward)") if node is not None else "(backward)"
        if self.phase == "optimizer":
            return "optimizer"
        return self.stack[-1] if self.stack else "(top)"

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No ``torch._disable_dynamo`` wrapper around :meth:`__torch_dispatch__` (torch's hook for it): its first call
        imports ``torch._dynamo``, ~2 s of a CLI answer on 2 cores, and the tracer never runs under ``torch.compile``."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = base_name(func)
        if name in FREE or getattr(func, "is_view", False) or self.phase == "setup":
            return func(*args, **kwargs)
        if self.low is not None and name in _LOW_ATEN and self.phase in ("forward", "backward"):
            args = tuple(self._to_low(a) for a in args)
        ins = tensors(list(args)) + tensors(list(kwargs.values()))
        if self.meta and ins and all(t.device.type != "meta" for t in ins):
            return func(*args, **kwargs)  # host-side scalars (an optimizer's step count): not part of the device's step
        ms = spread = None
        if self.timing is not None:
            out, ms, spread = _timed(func, args, kwargs, **self.timing)
        else:
            out = _meta_shortcut(name, args) if self.meta else None
            if out is None:
                out = func(*args, **kwargs)
            if self.channels_last and name in ("convolution", "convolution_backward"):
                out = _channels_last(out)
        outs = tensors(out)
        if not ins and not outs:
            return out
        module = self.where()
        first = len(self.records)
        calls = _backward_passes(args, out) if self.split_conv_backward and name == "convolution_backward" else [(args, out)]
        for call_args, call_out in calls:
            self._record(func, name, module, ins, tensors(call_out), call_args, kwargs, call_out, ms, spread)
        self._touch(first, tensors(list(read_args(name, args))) + tensors(list(kwargs.values())), outs or written_args(func, args, kwargs))
        last = self.records[-1]
        if self.conv_transposes and last.family == "conv" and (last.unit in TENSOR_CORE_UNITS or self.tf32_transposes and last.dtype == "float32"):
            self._nchw_transposes(module, last.dtype, tensors(list(read_args(name, args))), outs)
        return out

    def _touch(self, record: int, reads: list[torch.Tensor], writes: list[torch.Tensor]) -> None:
        """Note the storages record ``record`` reads and writes, in order (:mod:`prenet.ops.reuse`), where ``reuse``."""
        if not self.reuse:
            return
        for ts, is_read in ((reads, True), (writes, False)):
            for t in ts:
                try:
                    storage = t.untyped_storage()
                    key, size = storage._cdata, min(nbytes(t), storage.nbytes())
                except (RuntimeError, NotImplementedError):  # a tensor without a storage (sparse, nested)
                    continue
                self._alive.append(storage)
                self.touches.append((record, key, size, is_read))

    def finish(self) -> list[OpRecord]:
        """The records, each with its reads' distances (:func:`~prenet.ops.reuse.read_distances`) where noted."""
        if self.reuse:
            for r, reads in zip(self.records, read_distances(self.touches, len(self.records)), strict=True):
                r.reads = reads
            self._alive.clear()
        return self.records

    def _record(self, func, name: str, module: str, ins: list, outs: list, args: tuple, kwargs: dict, out: Any, ms, spread) -> None:
        """Append the op record of one call (``ms``/``spread``: its timing, None on meta)."""
        groups, channels = conv_groups(name, args)
        family = family_of(name, phase=self.phase, groups=groups, channels=channels, pointwise=torch.Tag.pointwise in getattr(func, "tags", ()))
        native = _native_conv_call(name, args, out, groups, self.cpu_threads) if family == "conv" else None
        if native is not None:
            family = NATIVE_CONV
        floats = [t for t in ins + outs if t.is_floating_point()]
        dtype = _DTYPE_NAMES.get(floats[0].dtype, str(floats[0].dtype)) if floats else "int64"
        if name in ("_to_copy", "copy_") and outs:
            dtype = _DTYPE_NAMES.get(outs[0].dtype, dtype)
        if family == "conv_depthwise" and self.cpu_threads is not None and _brgemm_depthwise_call(name, args, dtype):
            family = DEPTHWISE_BRGEMM
        b, m, n, k = native[0] if native else gemm_view(name, args, out)
        self.records.append(
            OpRecord(
                op=name,
                family=family,
                phase=self.phase,
                module=module,
                flops=op_flops(name, args, kwargs, out),
                bytes=moved_bytes(read_args(name, args), kwargs, out, None if outs else written_args(func, args, kwargs))
                + (native[1] if native else 0)
                - unread_bytes(name, args)
                + rnn_workspace_bytes(name, args, out),
                dtype=dtype,
                unit=unit_of(family, dtype, self.precision, self.cudnn_tf32),
                batch=b,
                m=m,
                n=n,
                k=k,
                groups=groups,
                out_numel=int(sum(t.numel() for t in outs)),
                layout=_layout(name, args) if k else 0,
                shapes=_shape_text(args),
                out_shapes=_shape_text(outs),
                strides=_stride_text(args),
                measured_ms=ms,
                spread_rel=spread,
            )
        )

    def _nchw_transposes(self, module: str, dtype: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        """The layout transposes cuDNN runs around a tensor-core convolution of NCHW tensors (its kernels are NHWC):
        each 4-D operand the call reads in (``nchwToNhwc``), each 4-D result out (``nhwcToNchw``), a read and a write each. None for
        ``channels_last`` tensors: what ``--memory-format channels_last`` saves."""
        nchw = [t for t in ins if t.dim() == 4 and t.is_floating_point() and not t.is_contiguous(memory_format=torch.channels_last)]
        if not nchw:
            return
        for op, ts in zip(LAYOUT_TRANSPOSES, (nchw, [t for t in outs if t.dim() == 4])):
            if ts:
                size = sum(nbytes(t) for t in ts)
                numel = int(sum(t.numel() for t in ts))
                self.records.append(
                    OpRecord(
                        op=op,
                        family="copy",
                        phase=self.phase,
                        module=module,
                        flops=0.0,
                        bytes=2 * size,
                        dtype=dtype,
                        unit=unit_of("copy", dtype, self.precision),
                        out_numel=numel,
                        shapes=_shape_text(ts),
                    )  # fmt: skip
                )


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype batch norm keeps its statistics in: FP32 for FP16/BF16 inputs (as torch's kernels and meta do)."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _channels_last(out: Any) -> Any:
    """``out`` (a tensor or a tuple of them) with its 4-D tensors in NHWC."""
    if isinstance(out, torch.Tensor):
        return out.contiguous(memory_format=torch.channels_last) if out.dim() == 4 else out
    if isinstance(out, tuple):
        return tuple(_channels_last(o) for o in out)
    return out


def _meta_shortcut(name: str, args: tuple) -> Any:
    """The outputs torch's meta kernel would give, for the ops whose meta kernel is a Python decomposition: batch norm's
    runs ~20 ms a call and its first call imports ``torch._dynamo`` (~2 s on 2 cores), a ResNet-50 trace's 1.2 s of
    1.5 s. Same shapes, dtypes and strides (``tests/test_meta_device.py`` holds it against the decomposition); None: call
    the op."""
    if name == "native_batch_norm" and args[1] is not None:
        x = args[0]
        stat = x.new_empty((x.shape[1],), dtype=_stat_dtype(x))
        return torch.empty_like(x), stat, torch.empty_like(stat)
    if name == "native_batch_norm_backward" and args[2] is not None:
        x, w, mask = args[1], args[2], args[9]
        return torch.empty_like(x), *(torch.empty_like(w) if m else None for m in mask[1:])
    return None


def _backward_passes(args: tuple, out: Any) -> list[tuple[tuple, Any]]:
    """``convolution_backward``'s (args, outputs) per kernel cuDNN runs: the input gradient (mask ``[1, 0, 0]``) and the
    weight gradient with the bias's (``[0, 1, b]``), each with only its own outputs; one call when the mask asks for one."""
    mask = list(args[10]) if len(args) > 10 else [True, True, True]
    if not (mask[0] and mask[1]) or not isinstance(out, (tuple, list)):
        return [(args, out)]
    data = (*args[:10], [True, False, False], *args[11:])
    weight = (*args[:10], [False, True, bool(mask[2])], *args[11:])
    return [(data, (out[0], None, None)), (weight, (None, out[1], out[2]))]


def _layout(name: str, args: tuple) -> int:
    """Transposition of a GEMM's two matrix operands (see :attr:`OpRecord.layout`)."""
    mats = [t for t in args if isinstance(t, torch.Tensor) and t.dim() >= 2]
    if name in ("addmm", "baddbmm"):
        mats = mats[-2:]
    code = 0
    for bit, t in zip((1, 2), mats[:2]):
        if t.stride(-1) != 1:
            code += bit
    return code


def _timed(func, args, kwargs, *, min_block_ms: float, repeats: int) -> tuple[Any, float, float]:
    """Run ``func`` once for its result, then ``repeats`` blocks of calls lasting ≥ ``min_block_ms``; the median per call (ms)
    and the spread (IQR / median) of the blocks. CUDA work is synchronized before every clock read."""
    cuda = any(t.is_cuda for t in tensors(list(args)))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = func(*args, **kwargs)
    sync()
    once = max((time.perf_counter() - t0) * 1e3, 1e-4)
    number = max(1, min(200, math.ceil(min_block_ms / once)))
    per = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(number):
            func(*args, **kwargs)
        sync()
        per.append((time.perf_counter() - t0) * 1e3 / number)
    per.sort()
    med = per[len(per) // 2]
    q1, q3 = per[len(per) // 4], per[(3 * len(per)) // 4]
    return out, med, (q3 - q1) / med if med > 0 else 0.0


def classifies(out: torch.Tensor, labels: torch.Tensor | None) -> bool:
    """Whether a step's loss is cross-entropy: logits [B, C] with integer labels [B] (else it is the output's mean).
    The one rule behind :func:`training_loss`, the traced step, the memory trace and the PreNeT recipe's loss layer."""
    if labels is None or out.dim() != 2 or labels.dim() != 1 or labels.is_floating_point():
        return False
    if labels.shape[0] != out.shape[0]:
        raise PrenetError(f"the model's output has {out.shape[0]} rows but the labels {labels.shape[0]}: logits [B, C] need labels [B]")
    return True


def training_loss(out: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    """The loss of a step as prenet times and predicts it: cross-entropy for logits [B, C] and integer labels [B],
    else the mean of the output (:func:`classifies`)."""
    return nn.functional.cross_entropy(out, labels) if classifies(out, labels) else out.float().mean()


def _module_names(module: nn.Module) -> dict[int, str]:
    return {id(m): name or type(m).__name__ for name, m in module.named_modules()}


def _check(precision: str, optimizer: str) -> None:
    if precision not in PRECISIONS:
        raise PrenetError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise PrenetError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")


def _run(
    module: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor | None,
    tracer: _Tracer,
    *,
    optimizer: str,
    precision: str,
    device_type: str,
    real: bool,
    input_grad: bool = False,
    direction: str = "train_step",
    via_torch_optim: bool = False,
    fused: bool = False,
    master_weights: bool = False,
) -> None:
    """One step under ``tracer``: forward and loss (autocast when asked), backward, optimizer step. ``direction``
    ``forward``: the forward alone (eval mode, no grad); ``forward_backward``: forward, then backward from a gradient of
    the output's shape (no loss op: a layer inside a network) to weights and input; ``train_step``: the full step.
    ``master_weights``: the optimizer steps FP32 master copies of the (FP16) parameters (:func:`_master_weights_step`)."""
    if direction not in DIRECTIONS:
        raise PrenetError(f"unknown direction {direction!r}; choose one of {', '.join(DIRECTIONS)}")
    layer = direction != "train_step" or input_grad
    module.train(direction != "forward")
    params = [p for p in module.parameters() if p.requires_grad]
    foreach = None if fused else (device_type == "cuda") or None
    opt = (
        make_optimizer(optimizer, params, foreach=foreach, fused=fused or None, weight_decay=STEP_WEIGHT_DECAY.get(optimizer, 0.0))
        if params and (real or via_torch_optim)
        else None
    )
    if opt is not None:
        prime_state(optimizer, opt)
    if input_grad and inputs.is_floating_point():
        inputs = inputs.detach().requires_grad_(True)
    names = tracer.names

    def pre(mod, args):
        tracer.stack.append(names.get(id(mod), type(mod).__name__))

    def post(mod, args, out):
        if tracer.stack:
            tracer.stack.pop()

    low = LOW_DTYPE.get(precision)
    if low is None:
        amp = nullcontext()
    elif real:
        amp = torch.autocast(device_type, dtype=low)
    else:
        amp = Autocast(device_type, low)
    h1 = nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = nn.modules.module.register_module_forward_hook(post)
    try:
        with ExitStack() as stack:
            stack.enter_context(tracer)
            stack.enter_context(_Labels(tracer))
            if not real:
                stack.enter_context(_FusedAttention(device_type))
                if low is not None:  # a checkpointed block's recompute in backward re-enters this autocast
                    from prenet.checkpointing import RECOMPUTE_CONTEXT

                    token = RECOMPUTE_CONTEXT.set(lambda: Autocast(device_type, low))
                    stack.callback(RECOMPUTE_CONTEXT.reset, token)
            tracer.phase = "forward"
            with amp, torch.set_grad_enabled(direction != "forward"):
                try:
                    out = module(inputs)
                except PrenetError:
                    raise
                except Exception as e:  # noqa: BLE001 - the user's model failed: say where
                    where = tracer.stack[-1] if tracer.stack else "the top module"
                    hint = (
                        "; its forward reads a tensor's value, which a trace on the meta device has not (for a transformers "
                        "model, --model-arg _attn_implementation=eager skips SDPA's padding check, and the answer then times "
                        "eager attention)"
                        if tracer.meta and "cannot be called on meta tensors" in str(e)
                        else "; a mixture of experts' grouped GEMMs (torch._grouped_mm) run in BF16 only: ask with --precision bf16"
                        if "Expected inputs of BF16 type" in str(e)
                        else ""
                    )
                    raise PrenetError(
                        f"the model's forward failed in {where} ({tracer.records[-1].op if tracer.records else 'before any op'} "
                        f"was the last op): {type(e).__name__}: {e}{hint}"
                    ) from e
                if not isinstance(out, torch.Tensor):
                    raise PrenetError(f"the model's forward returned {type(out).__name__}; prenet needs a tensor (logits or a value to average)")
                loss = None if layer or direction == "forward" else training_loss(out, labels)
            tracer.stack.clear()
            if direction == "forward":
                return
            tracer.phase = "backward"
            if loss is None:
                tracer.phase = "setup"  # the output gradient is given, as to a layer inside a network: not an op of the step
                with torch.no_grad():
                    seed = torch.ones_like(out)
                tracer.phase = "backward"
                out.backward(seed)
            else:
                if precision == "fp16" or master_weights:
                    loss = loss * 65536.0  # GradScaler / apex's loss scale: the scaled loss is what backward starts from
                loss.backward()
            if direction == "forward_backward":
                return
            tracer.phase = "optimizer"
            if precision == "fp16":
                _unscale_records(tracer, module)
            if opt is not None:
                opt.step()
            elif params and not real and master_weights:
                _master_weights_step(optimizer, params, foreach=foreach, fused=fused, tracer=tracer)
            elif params and not real:
                meta_optimizer_step(optimizer, params, foreach=foreach, fused=fused, tracer=tracer, scaled=precision == "fp16")
    finally:
        h1.remove()
        h2.remove()


def meta_optimizer_step(
    name: str, params: list[nn.Parameter], *, foreach: bool | None, fused: bool = False, tracer: _Tracer | None = None, scaled: bool = False
) -> None:
    """The first step of :func:`~prenet.optimizers.make_optimizer`'s ``name`` on ``params``, through torch's functional
    optimizers: the same ops as ``torch.optim.SGD/Adam(...).step()`` (their lazy state included; a test compares the
    traces op by op), without constructing an ``Optimizer``, whose first use imports ``torch._dynamo`` (~2 s of a
    CLI answer on 2 cores) for nothing on the meta device. ``fused``: the one fused kernel torch runs for
    ``fused=True`` (``_fused_adam_``/``_fused_adamw_``; ``_fused_sgd_``, which has no meta kernel, is recorded on
    ``tracer`` as it reads and writes). ``scaled``: a GradScaler steps the fused kernel, which then unscales and writes
    back the gradients (``grad_scale``, ``found_inf``), as ``GradScaler.step`` does for ``fused=True``."""
    from torch.optim.adam import adam
    from torch.optim.rmsprop import rmsprop
    from torch.optim.sgd import sgd

    from prenet.optimizers import STEP_WEIGHT_DECAY, TIMING_LR

    with_grad = [p for p in params if p.grad is not None]
    grads = [p.grad for p in with_grad]
    with torch.no_grad():
        if name in ("sgd", "momentum", "nesterov"):
            momentum = 0.0 if name == "sgd" else 0.9
            if fused:
                if tracer is not None and with_grad:
                    tracer.records.append(_fused_sgd_record(with_grad, momentum > 0, scaled))
                return
            # steady state: the buffers exist (allocated, not recorded: an allocation is no op of the step)
            buffers = [torch.empty_like(p, memory_format=torch.preserve_format) if momentum else None for p in with_grad]
            sgd(with_grad, grads, buffers, weight_decay=0.0, momentum=momentum, lr=TIMING_LR, dampening=0.0, nesterov=name == "nesterov",
                maximize=False, has_sparse_grad=False, foreach=foreach, fused=None, grad_scale=None, found_inf=None)  # fmt: skip
        elif name in ("adam", "adamw"):
            # steady state: the step counts (fused: on the parameters' device) and moment buffers exist, as
            # prime_state gives torch.optim (created outside the step: not recorded)
            with _setup_phase(tracer):
                steps = [torch.zeros((), dtype=torch.float32, device=p.device) if fused else torch.tensor(0.0) for p in with_grad]
                exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in with_grad]
                exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in with_grad]
                dev = with_grad[0].device if with_grad else None
                grad_scale, found_inf = (torch.ones((), device=dev), torch.zeros((), device=dev)) if fused and scaled else (None, None)
            adam(with_grad, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, has_complex=False, beta1=0.9, beta2=0.999,
                 lr=TIMING_LR, weight_decay=STEP_WEIGHT_DECAY.get(name, 0.0), eps=1e-8, maximize=False,
                 foreach=None if fused else foreach, capturable=False, differentiable=False, fused=fused or None, grad_scale=grad_scale,
                 found_inf=found_inf, decoupled_weight_decay=name == "adamw")  # fmt: skip
        elif name == "rmsprop":
            # steady state: the step counts, square averages and momentum buffers exist, as prime_state gives
            # torch.optim (created outside the step: not recorded)
            with _setup_phase(tracer):
                steps = [torch.tensor(0.0) for _ in with_grad]
                square_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in with_grad]
                buffers = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in with_grad]
            rmsprop(with_grad, grads, square_avgs, [], buffers, steps, foreach=foreach, maximize=False, differentiable=False,
                    capturable=False, has_complex=False, lr=TIMING_LR, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.9,
                    centered=False)  # fmt: skip
        else:
            raise PrenetError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def _master_weights_step(optimizer: str, params: list[nn.Parameter], *, foreach: bool | None, fused: bool, tracer: _Tracer) -> None:
    """The optimizer step of a model trained in FP16 with FP32 master weights (apex AMP O2, fairseq's FP16Optimizer):
    each FP16 gradient unscaled into its FP32 master gradient (one pass: read 2 bytes, write 4 per element, as apex's
    ``multi_tensor_scale``), the optimizer on the FP32 masters (with their FP32 state), and each master copied back into
    its FP16 parameter. The master copies exist between steps (made under phase ``setup``, not recorded)."""
    with_grad = [p for p in params if p.grad is not None]
    if other := sorted({str(p.dtype) for p in with_grad} - {"torch.float16"}):
        raise PrenetError(f"master_weights keeps FP32 copies of FP16 weights, but the model has {', '.join(other)} ones; call model.half() first")
    with _setup_phase(tracer):
        masters = [nn.Parameter(torch.empty_like(p, dtype=torch.float32)) for p in with_grad]
    with torch.no_grad():
        for m, p in zip(masters, with_grad):
            m.grad = p.grad.to(torch.float32)
    meta_optimizer_step(optimizer, masters, foreach=foreach, fused=fused, tracer=tracer)
    with torch.no_grad():
        for m, p in zip(masters, with_grad):
            p.copy_(m)


@contextmanager
def _setup_phase(tracer: _Tracer | None):
    """Ops made inside are an optimizer's steady state (its buffers and step counts, as ``prime_state`` gives
    torch.optim), created outside the step: recorded under phase ``setup``, not as ops of the step."""
    phase = tracer.phase if tracer is not None else None
    if tracer is not None:
        tracer.phase = "setup"
    try:
        yield
    finally:
        if tracer is not None:
            tracer.phase = phase


def _fused_sgd_record(params: list[nn.Parameter], momentum: bool, scaled: bool = False) -> OpRecord:
    """torch's ``_fused_sgd_`` over ``params``: reads each parameter, gradient and momentum buffer and writes the
    parameters and buffers back, the gradients too when ``scaled`` (as :func:`~prenet.ops.accounting.written_args`
    counts the fused kernels that have a meta kernel); FLOPs as
    :func:`~prenet.ops.accounting.op_flops` counts a pointwise op over its tensor lists."""
    numel = sum(int(p.numel()) for p in params)
    size = sum(nbytes(p) for p in params)
    return OpRecord(
        op="_fused_sgd_",
        family="optimizer",
        phase="optimizer",
        module="optimizer",
        flops=float((3 if momentum else 2) * numel),
        bytes=((5 if momentum else 3) + int(scaled)) * size,
        dtype="float32",
        unit="fp32",
        out_numel=0,
        shapes=f"{len(params)} parameters",
    )


def _unscale_records(tracer: _Tracer, module: nn.Module) -> None:
    """GradScaler.unscale_: one fused pass reading and writing every gradient and checking it for inf/NaN."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return
    size = sum(nbytes(g) for g in grads)
    tracer.records.append(
        OpRecord(
            op="_amp_foreach_non_finite_check_and_unscale_",
            family="optimizer",
            phase="optimizer",
            module="GradScaler",
            flops=float(sum(g.numel() for g in grads)),
            bytes=2 * size,
            dtype="float32",
            unit="fp32",
            out_numel=int(sum(g.numel() for g in grads)),
            shapes=f"{len(grads)} gradients",
        )
    )


def _split(example_batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    from prenet.measurement.steps import unpack_example

    return unpack_example(example_batch)


def trace_step(
    module: nn.Module,
    example_batch: Any,
    *,
    optimizer: str = "sgd",
    precision: str = "fp32",
    device_type: str = "cpu",
    direction: str = "train_step",
    input_grad: bool = False,
    via_torch_optim: bool = False,
    fused: bool = False,
    memory_format: str = "contiguous",
    master_weights: bool = False,
    threads: int = 1,
) -> StepTrace:
    """The ops of one training step of ``module`` on ``example_batch`` (a tensor, or ``(inputs, labels)``), traced on the
    meta device (the optimizer step through :func:`meta_optimizer_step`; ``via_torch_optim``: through ``torch.optim``,
    the reference the tests compare it with). ``device_type`` (``cpu`` | ``cuda``) picks the autocast op lists and whether the optimizer uses foreach
    kernels, as torch does on that device; ``fused``: the optimizer as ``torch.optim.*(fused=True)`` runs it, one fused
    kernel. ``memory_format`` (:data:`~prenet.names.MEMORY_FORMATS`): ``channels_last`` puts the module's and the
    batch's 4-D tensors in NHWC, as ``.to(memory_format=torch.channels_last)`` does; on CUDA, tensor-core (FP16/BF16/TF32) convolutions of
    NCHW tensors carry cuDNN's layout transposes (copy ops), NHWC ones do not. The module is copied (its weights are
    never touched). ``direction`` other
    than ``train_step``, or ``input_grad``, traces one layer as the benchmarks time it: the input requires grad and backward
    starts from a given output gradient (see :func:`_run`). ``master_weights``: a ``model.half()`` step as apex AMP O2
    runs it, its loss scaled and its optimizer on FP32 master copies (:func:`_master_weights_step`). ``threads``: the
    CPU threads the step runs on (torch picks some convolutions' kernels by it: :func:`conv_runs_natively`)."""
    _check(precision, optimizer)
    if master_weights and (precision != "fp32" or via_torch_optim):
        raise PrenetError("master_weights traces a model.half() step as apex O2 runs it: use precision fp32 (no autocast), without via_torch_optim")
    if fused and optimizer not in FUSED_OPTIMIZERS:
        raise PrenetError(f"torch has no fused {optimizer}; drop fused (--fused), or choose one of {', '.join(FUSED_OPTIMIZERS)}")
    if precision == "tf32" and device_type != "cuda":
        raise PrenetError("precision tf32 exists on NVIDIA GPUs only (Ampere and later); use fp32 or bf16 on a CPU")
    if memory_format not in MEMORY_FORMATS:
        raise PrenetError(f"unknown memory format {memory_format!r}; choose one of {', '.join(MEMORY_FORMATS)}")
    inputs, labels = _split(example_batch)
    meta = module if _on_meta(module) else copy.deepcopy(module).to("meta")
    for p in meta.parameters():
        p.grad = None
    notes = []
    if memory_format == "channels_last":
        if inputs.dim() != 4 and not any(p.dim() == 4 for p in meta.parameters()):
            notes.append("--memory-format channels_last changes nothing here: the model has no 4-D input or weights")
        meta = copy.deepcopy(meta).to(memory_format=torch.channels_last)  # the caller's module keeps its layout
        if inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
    tracer = _Tracer(precision=precision, meta=True, names=_module_names(meta), timing=None)
    tracer.reuse = device_type == "cpu"
    tracer.conv_transposes = tracer.split_conv_backward = device_type == "cuda"
    tracer.tf32_transposes = device_type == "cuda" and precision == "fp32"
    tracer.channels_last = memory_format == "channels_last"
    tracer.cpu_threads = threads if device_type == "cpu" else None
    with without_compiler_imports():
        _run(
            meta,
            inputs.to("meta"),
            None if labels is None else labels.to("meta"),
            tracer,
            optimizer=optimizer,
            precision=precision,
            device_type=device_type,
            real=False,
            input_grad=input_grad or direction != "train_step",
            direction=direction,
            via_torch_optim=via_torch_optim,
            fused=fused,
            master_weights=master_weights,
        )
    if native := sum(r.family == NATIVE_CONV and r.phase == "forward" for r in tracer.records):
        notes.append(
            f"{native} of the step's convolutions run natively on {threads} CPU thread{'s' if threads > 1 else ''} (THNN: a GEMM per sample, as torch "
            "picks for a 1×1 unstrided kernel on fewer than 16 samples, or for one small sample), timed as such; "
            "with more threads, or 16 samples or more, oneDNN runs them (--threads)"
        )
    if brgemm := sum(r.family == DEPTHWISE_BRGEMM for r in tracer.records):
        notes.append(
            f"{brgemm} of the step's depthwise convolutions are strided: in BF16 oneDNN forms their input gradient with a "
            "batch-reduce GEMM (brgconv_strided), not its depthwise kernel, timed as such (7x the FP32 time of such a "
            "backward measured on an AVX512-BF16 CPU); run in FP32 (outside autocast) they would take its depthwise kernel"
        )
    return StepTrace(
        tracer.finish(),
        precision,
        optimizer,
        device_type,
        [int(s) for s in inputs.shape],
        sum(int(p.numel()) for p in meta.parameters()),
        notes=notes,
        fused=fused,
        memory_format=memory_format,
        grad_params=grad_params(meta),
        **dict(zip(("blocks", "heads"), attention_blocks(meta), strict=True)),
        activation_bytes=_saved_bytes(meta, inputs, labels, precision) if device_type == "cpu" and direction == "train_step" else None,
    )


def _saved_bytes(meta: nn.Module, inputs: torch.Tensor, labels: torch.Tensor | None, precision: str) -> int | None:
    """The bytes one training forward of ``meta`` saves for backward, at ``precision`` on a CPU (autocast's CPU op
    lists for bf16/fp16): :func:`prenet.memory.training.trace_saved`, with attention and LSTMs routed to the kernels
    the traced step runs (:class:`_FusedAttention`: CPU flash attention keeps no L×L matrix). None where that forward
    fails: the figure only sizes the step's working set, so its absence is not an error."""
    from prenet.memory.training import autocast_of, trace_saved

    try:
        batch = inputs.to("meta") if labels is None else (inputs.to("meta"), labels.to("meta"))
        with _FusedAttention("cpu"):
            saved, _ = trace_saved(meta, batch, None, autocast_of(precision, "cpu"))
    except Exception:  # noqa: BLE001 - a best-effort second forward: the trace itself already succeeded
        return None
    return int(sum(saved))


_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_head", "n_heads", "heads")


def _heads(module: nn.Module) -> int | None:
    """The attention heads of a block: an ``nn.MultiheadAttention``'s ``num_heads``, or an integer attribute a
    hand-written or Hugging Face attention module keeps (``num_heads``, ``heads``, ``n_head``...; or its ``config``'s)."""
    for m in module.modules():
        if isinstance(m, nn.MultiheadAttention):
            return int(m.num_heads)
        for obj in (m, getattr(m, "config", None)):
            for a in _HEAD_ATTRS:
                v = getattr(obj, a, None) if obj is not None else None
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return v
    return None


def attention_blocks(module: nn.Module) -> tuple[list[str], int | None]:
    """(names of the blocks of the model's outermost repeated stack of attention blocks, their heads): an
    ``nn.ModuleList``/``nn.Sequential`` of two or more modules of one type, each with parameters and attention heads
    (:func:`_heads`); ([], None) when the model has none."""
    for name, sub in module.named_modules():
        kids = list(sub.named_children())
        if not isinstance(sub, (nn.ModuleList, nn.Sequential)) or len(kids) < 2 or len({type(k) for _, k in kids}) != 1:
            continue
        heads = _heads(kids[0][1])
        if heads is not None and any(True for _ in kids[0][1].parameters()):
            return [f"{name}.{k}" if name else k for k, _ in kids], heads
    return [], None


def grad_params(module: nn.Module) -> list[list[Any]]:
    """[owning module's name as the tracer names it, elements] of each trainable parameter, in registration order."""
    names = {name: mod_name for mod_name, m in module.named_modules() for name, _ in m.named_parameters(prefix=mod_name, recurse=False)}
    top = type(module).__name__
    return [[names.get(n) or top, int(p.numel())] for n, p in module.named_parameters() if p.requires_grad]


def set_tf32(precision: str) -> None:
    """Set torch's TF32 switches as ``precision`` means them: ``tf32`` turns TF32 on in cuBLAS and cuDNN; every other
    precision leaves torch's defaults, cuDNN on TF32 (``fp32``: :data:`~prenet.ops.families.CUDNN_TF32_FAMILIES`) and
    cuBLAS in IEEE FP32."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = True


def measure_step(
    module: nn.Module,
    example_batch: Any,
    *,
    optimizer: str = "sgd",
    precision: str = "fp32",
    min_block_ms: float = 0.3,
    repeats: int = 3,
    warmup: bool = True,
    input_grad: bool = False,
    fused: bool = False,
) -> StepTrace:
    """The ops of one real training step on the module's device (CPU or CUDA), each timed in place (``measured_ms`` per
    call, median of ``repeats`` blocks of ≥ ``min_block_ms``). ``fp16``/``bf16`` use the real ``torch.autocast`` of that
    device; on CUDA ``fp32`` runs as torch's defaults do (cuDNN on TF32 where the GPU has it, cuBLAS in IEEE FP32:
    :data:`~prenet.ops.families.CUDNN_TF32_FAMILIES`, its records name the unit that ran) and ``tf32`` turns TF32 on in
    both. ``warmup`` runs one untimed step first (allocator and kernel caches as in a running job)."""
    _check(precision, optimizer)
    inputs, labels = _split(example_batch)
    dev = inputs.device.type
    if dev == "cpu" and precision in ("tf32", "fp16"):
        raise PrenetError(f"precision {precision} cannot be measured on a CPU; measure fp32 or bf16")
    cudnn_tf32 = False
    if dev == "cuda":
        set_tf32(precision)
        cudnn_tf32 = precision == "fp32" and torch.cuda.get_device_capability(inputs.device) >= (8, 0)  # Ampere and later
    kw = dict(optimizer=optimizer, precision=precision, device_type=dev, real=True, input_grad=input_grad, fused=fused)
    if warmup:
        _run(module, inputs, labels, _Tracer(precision=precision, meta=False, names={}, timing=None), **kw)
        module.zero_grad(set_to_none=True)
    tracer = _Tracer(precision=precision, meta=False, names=_module_names(module), timing={"min_block_ms": min_block_ms, "repeats": repeats})
    tracer.cudnn_tf32 = cudnn_tf32
    tracer.cpu_threads = torch.get_num_threads() if dev == "cpu" else None
    _run(module, inputs, labels, tracer, **kw)
    module.zero_grad(set_to_none=True)
    shape = [int(s) for s in inputs.shape]
    return StepTrace(tracer.records, precision, optimizer, dev, shape, sum(int(p.numel()) for p in module.parameters()), fused=fused)


def _on_meta(module: nn.Module) -> bool:
    ps = list(module.parameters()) + list(module.buffers())
    return bool(ps) and all(p.device.type == "meta" for p in ps)


def trace_call(fn: Any, *meta_args: torch.Tensor, precision: str = "fp32", cuda: bool = False) -> list[OpRecord]:
    """The forward ops of one call ``fn(*meta_args)`` on meta tensors (no autograd): how a single measured op of an
    external dataset becomes the same record a traced model gives. ``cuda``: as a CUDA trace records it (cuDNN's
    layout transposes around a tensor-core (FP16/BF16/TF32) convolution of NCHW tensors, as copy ops after it)."""
    tracer = _Tracer(precision=precision, meta=True, names={}, timing=None)
    tracer.conv_transposes = cuda
    with torch.no_grad(), tracer:
        fn(*meta_args)
    return tracer.records
