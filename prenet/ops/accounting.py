"""A call's tensors counted by the rules of :mod:`prenet.ops.families`: its FLOPs, the bytes it moves, the GEMM it
performs and the tensors it writes in place (the tracer's accounting; needs torch, unlike the family facts)."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from prenet.ops.families import ATTENTION_PREFIX


def tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in an argument (nested lists/tuples, as foreach ops take)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors(o)]
    return []


def nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def moved_bytes(args: tuple, kwargs: dict, out: Any, written: list[torch.Tensor] | None = None) -> int:
    """Bytes read (each distinct input tensor once) plus bytes written: every output tensor, or, for an op that updates
    its arguments in place and returns nothing (``_foreach_add_``, ``_fused_adam_``), those arguments (``written``)."""
    seen: set[int] = set()
    total = 0
    for t in tensors(list(args)) + tensors(list(kwargs.values())):
        if id(t) not in seen:
            seen.add(id(t))
            total += nbytes(t)
    outs = tensors(out)
    return total + sum(nbytes(t) for t in (outs if outs else written or []))


#: In-place ops that overwrite their destination (the first argument) without reading it: a copy reads only its
#: source, a fill or zero nothing.
OVERWRITES = frozenset({"copy_", "fill_", "zero_"})


def read_args(name: str, args: tuple) -> tuple:
    """The arguments an op reads: all of them, but the destination of an op that overwrites it (:data:`OVERWRITES`),
    and for ``convolution_backward``, whose input gradient needs the output gradient and the weight, and whose weight
    gradient the output gradient and the input (``mask`` says which it forms; the unread tensor is left out)."""
    if name in OVERWRITES and args:
        return (None, *args[1:])
    if name != "convolution_backward" or len(args) <= 10:
        return args
    mask = args[10]
    return (args[0], args[1] if mask[1] else None, args[2] if mask[0] else None, *args[3:])


#: Ops that read only the entries their indices pick from a table: an embedding lookup reads one row of its weight
#: per index (not the vocabulary), ``nll_loss`` one log-probability per target (not the classes). Counted whole, a
#: 30,522-word table made a batch's lookup a 94 MB read: 1.2 ms on the roofline of a CPU that took 12 µs.
GATHERS = frozenset({"embedding", "nll_loss_forward", "nll_loss2d_forward"})


def unread_bytes(name: str, args: tuple) -> int:
    """Bytes of ``args`` that :func:`moved_bytes` counts but a gather (:data:`GATHERS`) does not read: the table
    less the rows or entries its indices pick (at most the table). 0 for any other op."""
    if name not in GATHERS or len(args) < 2 or not isinstance(args[0], torch.Tensor) or not isinstance(args[1], torch.Tensor):
        return 0
    table, index = args[0], args[1]
    per_index = table.element_size() * (math.prod(table.shape[1:]) if name == "embedding" else 1)
    return max(0, nbytes(table) - min(nbytes(table), int(index.numel()) * per_index))


def rnn_workspace_bytes(name: str, args: tuple, out: Any) -> int:
    """The bytes of oneDNN's LSTM workspace that a ``meta`` trace lacks: ``mkldnn_rnn_layer`` writes it (the gates and
    states its backward reads back) and ``mkldnn_rnn_layer_backward`` reads it, but on ``meta`` it is an empty tensor,
    so a traced step moved 7x fewer bytes than the op benchmark's measured rows of the same layer (a 2-layer LSTM of
    256 units over 16 × 50 tokens: 1.4 against 10.6 MB; the trees answered it 4x too fast, BF16 on an Intel Xeon,
    2026-12-07). Its size is this oneDNN's own (:func:`lstm_workspace_bytes`). 0 for any other op, and where the
    workspace is real."""
    if name == "mkldnn_rnn_layer" and isinstance(out, (tuple, list)) and len(out) == 4:
        x, hidden, train, ws = args[0], int(args[10]), bool(args[15]), out[3]
    elif name == "mkldnn_rnn_layer_backward" and len(args) >= 23:
        x, hidden, train, ws = args[0], int(args[15]), bool(args[18]), args[22]
    else:
        return 0
    if not isinstance(ws, torch.Tensor) or ws.numel() or x.device.type != "meta" or x.dim() != 3:
        return 0
    steps, batch, features = (int(v) for v in x.shape)
    return lstm_workspace_bytes(steps, batch, features, hidden, str(x.dtype).removeprefix("torch."), train)


@functools.lru_cache(maxsize=256)
def lstm_workspace_bytes(steps: int, batch: int, features: int, hidden: int, dtype: str, train: bool) -> int:
    """Bytes of the workspace this torch's oneDNN allocates for one LSTM layer and direction over ``steps`` × ``batch``
    inputs of ``features`` (``dtype``: ``float32`` / ``bfloat16``): read off the real kernel on the CPU at 1 and
    1 + :data:`PROBE_STEPS` steps, the batch as given, and taken linear in the steps (it holds per-step gates and
    states)."""
    dt = getattr(torch, dtype)

    def real(t: int) -> int:
        z = functools.partial(torch.zeros, dtype=dt, device="cpu")
        b = z(4 * hidden)
        outs = torch.ops.aten.mkldnn_rnn_layer(
            z(t, batch, features), z(4 * hidden, features), z(4 * hidden, hidden), b, b, z(batch, hidden), z(batch, hidden),
            False, [], 2, hidden, 1, True, False, False, train,
        )  # fmt: skip
        return int(outs[3].numel()) * outs[3].element_size()

    from torch.utils._python_dispatch import _disable_current_modes

    # the real kernel, not the tracer's (or any mode's) view of it; under no_grad it allocates no workspace at all
    with torch.enable_grad(), _disable_current_modes():
        one, more = real(1), real(1 + PROBE_STEPS)
    return int(one + (more - one) / PROBE_STEPS * (steps - 1))


#: Steps apart of :func:`lstm_workspace_bytes`' two readings: its size grows in 4 KB pages, unevenly from one step to
#: the next (48 units, 6 samples, FP32: +4, +24, +8, +24 KB), evenly over 16.
PROBE_STEPS = 16


#: Fused optimizer kernels whose schema marks ``grads`` mutable but which write them back only when they unscale them
#: (a GradScaler's ``grad_scale`` given): CUDA's and the CPU's kernels store every other list and skip the gradients.
UNSCALED_GRADS_READ_ONLY = frozenset({"aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_"})


def written_args(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``func`` writes in place: its schema's mutable (``Tensor(a!)``) arguments, less a fused optimizer's
    gradients when it is given no ``grad_scale`` (:data:`UNSCALED_GRADS_READ_ONLY`)."""
    schema = func._schema
    read_only = {"grads"} if schema.name in UNSCALED_GRADS_READ_ONLY and kwargs.get("grad_scale") is None else set()
    out: list[torch.Tensor] = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write and a.name not in read_only:
            out += tensors(args[i] if i < len(args) else kwargs.get(a.name))
    return out


def _conv_dims(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, groups: int) -> tuple[int, int, int, int]:
    """Implicit GEMM of a convolution: (batch = groups, m = N·spatial_out, n = C_out/groups, k = C_in/groups·kernel)."""
    spatial = math.prod(int(s) for s in out.shape[2:]) if out.dim() > 2 else 1
    m = int(out.shape[0]) * spatial
    n = int(w.shape[0]) // max(groups, 1)
    k = math.prod(int(s) for s in w.shape[1:])
    return groups, m, n, k


def _grouped_dims(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None) -> tuple[int, int, int, int]:
    """(groups, m, n, k) of ``torch._grouped_mm`` (a mixture of experts' per-expert GEMMs in one kernel): tokens
    ``[rows, k]`` against experts ``[g, k, n]`` (the forward; ``m`` = rows / g, the tokens an expert gets on average,
    for the offsets that split them are data), batched ``[g, m, k] × [g, k, n]``, or ``[m, K] × [K, n]`` with K split
    into g groups (the experts' weight gradients: m = k of the weights, k = K / g)."""
    if x.dim() == 2 and w.dim() == 3:
        g = int(w.shape[0])
        return g, max(1, int(x.shape[0]) // max(g, 1)), int(w.shape[2]), int(x.shape[1])
    if x.dim() == 3 and w.dim() == 3:
        return int(x.shape[0]), int(x.shape[1]), int(w.shape[2]), int(x.shape[2])
    if x.dim() == 2 and w.dim() == 2 and offs is not None and offs.dim() == 1:
        g = int(offs.shape[0])
        return g, int(x.shape[0]), int(w.shape[1]), max(1, int(x.shape[1]) // max(g, 1))
    return 0, 0, 0, 0


def gemm_view(name: str, args: tuple, out: Any) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of the product op ``name`` computes, or a batch norm's (N, spatial size, channels, 0); (0, 0, 0,
    0) for other ops."""
    a = [x for x in args if isinstance(x, torch.Tensor)]
    try:
        if name in ("mm", "_int_mm") and len(a) >= 2:
            return 1, int(a[0].shape[0]), int(a[1].shape[1]), int(a[0].shape[1])
        if name in ("addmm",) and len(a) >= 3:
            return 1, int(a[1].shape[0]), int(a[2].shape[1]), int(a[1].shape[1])
        if name == "bmm" and len(a) >= 2:
            return int(a[0].shape[0]), int(a[0].shape[1]), int(a[1].shape[2]), int(a[0].shape[2])
        if name == "baddbmm" and len(a) >= 3:
            return int(a[1].shape[0]), int(a[1].shape[1]), int(a[2].shape[2]), int(a[1].shape[2])
        if name == "_grouped_mm" and len(a) >= 2:
            return _grouped_dims(a[0], a[1], a[2] if len(a) > 2 else None)
        if name in ("mv", "addmv"):
            mat = a[0] if name == "mv" else a[1]
            return 1, int(mat.shape[0]), 1, int(mat.shape[1])
        if name in ("convolution", "_convolution", "mkldnn_convolution", "_slow_conv2d_forward", "cudnn_convolution"):
            groups = int(args[8]) if name in ("convolution", "_convolution") and len(args) > 8 else 1
            o = out if isinstance(out, torch.Tensor) else tensors(out)[0]
            return _conv_dims(a[0], a[1], o, groups)
        if name == "convolution_backward":
            # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask)
            groups = int(args[9]) if len(args) > 9 else 1
            return _conv_dims(a[1], a[2], a[0], groups)
        if "batch_norm" in name and name != "batch_norm_stats" and a and a[0].dim() >= 3:
            # (N, C, *spatial): per channel a reduction over N runs of the spatial size, contiguous in NCHW. That run
            # sets a CPU kernel's speed (2026-12-06, AMD EPYC: backward of 16 x C x 2 x 2 at 0.8 GB/s, of 16 x C x 4 x 4
            # at 9-15): (batch N, m the spatial size, n the channels, k 0; k = 0 keeps it out of the GEMM tiling)
            x = a[0]
            return int(x.shape[0]), math.prod(int(v) for v in x.shape[2:]), int(x.shape[1]), 0
        if name in ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward") and len(a) >= 3:
            # one LSTM layer over T steps: [T·B, I+H] × [I+H, 4H] per step, as one implicit GEMM
            x, w_ih, w_hh = a[0], a[1], a[2]
            return 1, int(x.shape[0]) * int(x.shape[1]), int(w_ih.shape[0]), int(w_ih.shape[1]) + int(w_hh.shape[1])
        if name.startswith(ATTENTION_PREFIX) and len(a) >= 3:
            q, k = a[0], a[1]
            bh = math.prod(int(s) for s in q.shape[:-2]) if q.dim() > 2 else 1
            return bh, int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1])
    except (IndexError, RuntimeError, TypeError):
        pass
    return 0, 0, 0, 0


def op_flops(name: str, args: tuple, kwargs: dict, out: Any) -> float:
    """FLOPs of one call (see the module docstring)."""
    b, m, n, k = gemm_view(name, args, out)
    if name == "convolution_backward":
        mask = args[10] if len(args) > 10 else [True, True, True]
        return 2.0 * b * m * n * k * (int(bool(mask[0])) + int(bool(mask[1])))
    if name.startswith(ATTENTION_PREFIX) and m:
        # QKᵀ and PV: 2 products of B·H·Lq·Lk·D multiply-adds; backward recomputes P and forms dQ, dK, dV, dP (2.5×)
        fwd = 4.0 * b * m * n * k
        return 2.5 * fwd if "backward" in name else fwd
    if name == "mkldnn_rnn_layer_backward" and m:
        return 2.0 * 2.0 * b * m * n * k  # gradients of the input/hidden and of both weights
    if m:
        return 2.0 * b * m * n * k
    outs = tensors(out)
    return float(sum(t.numel() for t in outs)) if outs else float(sum(t.numel() for t in tensors(list(args))))


def conv_groups(name: str, args: tuple) -> tuple[int, int]:
    """(groups, input channels) of a convolution call; (1, 0) for other ops."""
    try:
        if name in ("convolution", "_convolution"):
            return int(args[8]), int(args[0].shape[1])
        if name == "convolution_backward":
            return int(args[9]), int(args[1].shape[1])
    except (IndexError, TypeError, AttributeError):
        pass
    return 1, 0
