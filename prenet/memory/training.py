"""Peak memory of one training step (bytes): predicted from the model alone, and measured.

Prediction (no hardware, no weights: the model may live on the ``meta`` device)::

    peak = weights + batch + optimizer state + max(live tensors during backward + transient, all gradients)

* weights, gradients: 4 bytes per float32 parameter each (under autocast too: FP32 master weights, FP32 gradients);
* optimizer state: plain SGD none, SGD with momentum one buffer, Adam two buffers per parameter;
* saved activations: every tensor autograd keeps for the backward pass, found by running the forward pass on
  the ``meta`` device under :func:`torch.autograd.graph.saved_tensors_hooks` and summing the distinct storages
  that are not parameters (so residual connections, pooling indices, dropout masks, attention weights and the
  gates of recurrent layers are counted as the framework actually saves them, each shared tensor once); under bf16 /
  fp16 autocast the forward runs under :class:`prenet.ops.autocast.Autocast` (torch's op lists on ``meta``), so each
  saved tensor counts at the dtype autocast gives it — 16-bit GEMM and convolution inputs, FP32 norms and losses — and
  the 16-bit weight copies of autocast's cast cache, saved by the ops that use them, count once each;
* live tensors during backward: backward runs the forward in reverse, freeing a layer's saved tensors as it forms
  that layer's parameter gradients, so the peak is the largest (saved tensors still alive + gradients formed so
  far) over the pass — a large embedding's gradient appears only when almost every activation is gone;
* largest transient: the backward pass holds a gradient of the largest activation while it computes the
  gradient of its input — twice the largest saved storage.

It is an estimate of the tensor memory a step allocates; a GPU adds its CUDA context (about 0.3–0.6 GiB), the
caching allocator's fragmentation and library workspaces (cuDNN, cuBLAS), which :func:`fits` leaves room for.

Measurement (:func:`measure_training_memory`): the peak of the bytes allocated during one real step — on the
CPU from the PyTorch profiler's allocator events (``profile_memory=True``), on CUDA from
``torch.cuda.max_memory_allocated`` — plus what was already allocated when the step began (weights, optimizer
state, the batch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prenet.errors import first_line
from prenet.measurement.steps import unpack_example
from prenet.memory.estimate import MemoryEstimate
from prenet.names import OPTIMIZER_STATE_BUFFERS
from prenet.ops.trace import training_loss


def trace_saved(
    module: nn.Module, example_batch: Any, traced_in: torch.dtype | None = None, autocast: tuple[str, torch.dtype] | None = None
) -> tuple[list[int], list[tuple[int, int]]]:
    """One training forward pass of ``module`` traced on the ``meta`` device (no memory, no weights needed):
    the bytes of each distinct storage autograd saves for backward, in the order saved (parameters excluded), and
    for each module with its own trainable parameters, (number of storages saved before its first call, bytes of
    those parameters) — where its gradients will appear in the backward pass. ``traced_in``: the forward runs with the
    model and its floating inputs in that dtype (a forward FP32 cannot run: a mixture of experts' grouped GEMMs are
    BF16-only), its bytes counted at FP32 size unless ``autocast`` is given. ``autocast``: (device type, 16-bit dtype) of
    a mixed-precision step, whose forward and loss run under :class:`~prenet.ops.autocast.Autocast` and whose saved
    tensors count at their own dtypes."""
    import copy

    from prenet.graph.walk import _on_meta
    from prenet.meta_device import without_compiler_imports

    meta = module if _on_meta(module) else copy.deepcopy(module).to("meta")
    if traced_in is not None:
        meta = copy.deepcopy(meta).to(traced_in)
    pscale = 4 // torch.empty((), dtype=traced_in).element_size() if traced_in is not None else 1  # FP32 gradients
    scale = pscale if autocast is None else 1
    inputs, labels = unpack_example(example_batch)
    x = inputs.to("meta", dtype=traced_in) if traced_in is not None and inputs.is_floating_point() else inputs.to("meta")
    y = labels.to("meta") if labels is not None else None
    params = {p.untyped_storage()._cdata for p in meta.parameters()}
    seen: dict[int, int] = {}
    uses: list[tuple[int, int]] = []
    called: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        key = s._cdata
        if key not in params and key not in seen:
            seen[key] = int(s.nbytes()) * (scale if t.is_floating_point() else 1)
        return t

    def pre(mod: nn.Module, args: Any) -> None:
        if id(mod) not in called:
            called.add(id(mod))
            own = sum(p.numel() * p.element_size() * pscale for p in mod.parameters(recurse=False) if p.requires_grad)
            if own:
                uses.append((len(seen), int(own)))

    handles = [m.register_forward_pre_hook(pre) for m in meta.modules() if any(True for _ in m.parameters(recurse=False))]
    was_training = meta.training
    meta.train()
    try:
        with without_compiler_imports(), torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with _autocast(autocast):
                training_loss(meta(x), y)
    finally:
        meta.train(was_training)
        for h in handles:
            h.remove()
    return list(seen.values()), uses


def recompute_bytes(module: nn.Module, example_batch: Any, autocast: tuple[str, torch.dtype] | None = None) -> int:
    """With activation checkpointing (:class:`prenet.checkpointing.Checkpointed` blocks): the most bytes one block
    saves when the backward pass recomputes it, its activations live again until its gradients are formed (0 without
    checkpointed blocks). Each block's forward is traced on ``meta`` with the inputs it gets in the step (``autocast``:
    as in :func:`trace_saved`)."""
    import copy

    from prenet.checkpointing import Checkpointed
    from prenet.graph.walk import _on_meta
    from prenet.meta_device import without_compiler_imports

    if not any(isinstance(m, Checkpointed) for m in module.modules()):  # every CLI answer asks: no copy unless needed
        return 0
    meta = module if _on_meta(module) else copy.deepcopy(module).to("meta")
    blocks = [m for m in meta.modules() if isinstance(m, Checkpointed)]
    calls: list[tuple[nn.Module, tuple, dict]] = []
    handles = [b.register_forward_pre_hook(lambda m, a, k: calls.append((m.block, a, k)), with_kwargs=True) for b in blocks]
    inputs, _ = unpack_example(example_batch)
    try:
        with without_compiler_imports(), torch.no_grad(), _autocast(autocast):
            meta(inputs.to("meta"))
    finally:
        for h in handles:
            h.remove()
    params = {p.untyped_storage()._cdata for p in meta.parameters()}
    peak = 0
    for block, args, kwargs in calls:
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            s = t.untyped_storage()
            if s._cdata not in params:
                seen.setdefault(s._cdata, int(s.nbytes()))
            return t

        with without_compiler_imports(), torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with _autocast(autocast):
                block(*args, **kwargs)
        peak = max(peak, sum(seen.values()))
    return peak


def backward_live_peak(saved: list[int], uses: list[tuple[int, int]], unplaced_grad_bytes: int = 0) -> int:
    """Most bytes that saved tensors and gradients hold together during backward, which runs the forward in
    reverse: at cut k the saved tensors 0..k−1 are still alive and the gradients of every parameter first used at
    or after position k exist. ``unplaced_grad_bytes`` (parameters never seen in a module call) count from the start."""
    import numpy as np

    n = len(saved)
    alive = np.concatenate([[0], np.cumsum(saved, dtype=np.int64)])  # alive[k] = Σ saved[:k]
    grads_at = np.zeros(n + 2, dtype=np.int64)
    for pos, b in uses:
        grads_at[min(pos, n)] += b
    formed = np.cumsum(grads_at[::-1])[::-1][: n + 1]  # formed[k] = Σ grads of uses at ≥ k
    return int((alive + formed).max()) + int(unplaced_grad_bytes)


def autocast_of(precision: str, device_type: str) -> tuple[str, torch.dtype] | None:
    """The (device type, 16-bit dtype) a step of ``precision`` runs its autocast region in; None for FP32 and TF32
    (TF32 keeps FP32 storage)."""
    from prenet.ops.trace import LOW_DTYPE

    low = LOW_DTYPE.get(precision)
    return (device_type, low) if low is not None else None


def _autocast(autocast: tuple[str, torch.dtype] | None):
    """The autocast emulation of (device type, dtype), or no context for None."""
    from contextlib import nullcontext

    from prenet.ops.autocast import Autocast

    return Autocast(*autocast) if autocast is not None else nullcontext()


def predict_training_memory(
    module: nn.Module,
    example_batch: Any,
    optimizer: str = "sgd",
    grad_accum: int = 1,
    *,
    traced_in: torch.dtype | None = None,
    precision: str = "fp32",
    device_type: str = "cuda",
) -> MemoryEstimate:
    """Predicted peak memory (bytes) of one steady-state training step of ``module`` on ``example_batch`` with
    ``optimizer`` (``sgd`` plain, ``sgd_momentum``, ``adam``); float32 parameters, gradients and optimizer state, and
    activations in ``precision`` (``bf16`` / ``fp16``: autocast with ``device_type``'s op lists, :func:`trace_saved`;
    else float32). ``grad_accum`` > 1: from the second micro-step on every gradient stays allocated through the
    forward and backward passes, so all saved activations and all gradients are live together. ``traced_in``: see
    :func:`trace_saved`."""
    amp = autocast_of(precision, device_type)
    if optimizer not in OPTIMIZER_STATE_BUFFERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_STATE_BUFFERS)}, got {optimizer!r}")
    trainable = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    inputs, labels = unpack_example(example_batch)
    in_bytes = inputs.numel() * inputs.element_size() + (labels.numel() * labels.element_size() if labels is not None else 0)
    saved, uses = trace_saved(module, example_batch, traced_in, amp)
    placed = sum(b for _, b in uses)
    return MemoryEstimate(
        weights_bytes=int(weights),
        gradients_bytes=int(trainable),
        optimizer_bytes=int(OPTIMIZER_STATE_BUFFERS[optimizer] * trainable),
        inputs_bytes=int(in_bytes),
        activations_bytes=int(sum(saved)),
        backward_live_bytes=int(sum(saved) + trainable) if grad_accum > 1 else backward_live_peak(saved, uses, max(trainable - placed, 0)),
        # the gradient being formed, and with checkpointing the recomputed block's activations alive with it
        transient_bytes=int(2 * max(saved, default=0) + recompute_bytes(module, example_batch, amp)),
    )


def predict_memory_noted(
    module: nn.Module, example_batch: Any, optimizer: str = "sgd", grad_accum: int = 1, *, precision: str = "fp32", device_type: str = "cuda"
) -> tuple[MemoryEstimate | None, str]:
    """(:func:`predict_training_memory` in ``precision``, "") — or, where the model's forward cannot run on ``meta`` in
    FP32 (a mixture of experts' BF16-only grouped GEMMs), the estimate with its activations traced in BF16 (counted at
    FP32 size for an FP32 step) and the line that says so, or (None, the line that says why there is none)."""
    kw = {"precision": precision, "device_type": device_type}
    try:
        return predict_training_memory(module, example_batch, optimizer, grad_accum, **kw), ""
    except (RuntimeError, NotImplementedError) as e:
        first = first_line(e)
        why = f"its FP32 forward cannot run on meta ({type(e).__name__}: {first})"
    try:
        memory = predict_training_memory(module, example_batch, optimizer, grad_accum, traced_in=torch.bfloat16, **kw)
    except (RuntimeError, NotImplementedError):
        return None, f"peak memory not predicted: {why}"
    counted = "at their autocast dtypes" if autocast_of(precision, device_type) else "at FP32 size"
    return memory, f"peak memory: {why}, so its saved activations were traced in BF16 and counted {counted}"


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def measure_training_memory(module: nn.Module, example_batch: Any, optimizer: str = "sgd", *, warmup: bool = True, precision: str = "fp32") -> int:
    """Measured peak memory (bytes) of one training step of ``module`` (on its device: CPU or CUDA), its forward and
    loss under ``torch.autocast`` for a ``bf16`` / ``fp16`` ``precision``. With ``warmup`` a first, unmeasured step
    creates the optimizer state; without it the measured step is the first one (its peak includes creating the state;
    the benchmark uses it as its warm-up step). Weights change by tiny steps (learning rate 1e-6)."""
    from prenet.measurement.models import training_step
    from prenet.optimizers import make_optimizer

    if optimizer == "sgd_momentum":
        raise ValueError("measured steps use the benchmark's optimizers: sgd (plain) or adam")
    inputs, labels = unpack_example(example_batch)
    module.train()
    opt = make_optimizer(optimizer, module.parameters())
    step = training_step(module, example_batch, optimizer, opt=opt, precision=precision)
    if warmup:
        step()
    opt.zero_grad(set_to_none=True)
    base = (
        _tensor_bytes(list(module.parameters()))
        + _tensor_bytes(list(module.buffers()))
        + _tensor_bytes(list(opt.state.values()))
        + _tensor_bytes([inputs, labels])
    )
    if inputs.is_cuda:
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return int(base + torch.cuda.max_memory_allocated() - start)
    import logging
    import os
    import sys

    from torch.profiler import ProfilerActivity, profile

    # the profiler warns once per block allocated before it started (their frees are not reported): silence it
    stderr_fd = sys.stderr.fileno() if hasattr(sys.stderr, "fileno") else None
    saved_fd = os.dup(2) if stderr_fd is not None else None
    try:
        if saved_fd is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        logging.disable(logging.WARNING)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    finally:
        logging.disable(logging.NOTSET)
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        if str(e.device_type()).endswith("CPU"):
            current += int(e.nbytes())
            peak = max(peak, current)
    return int(base + peak)
