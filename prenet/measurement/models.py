"""Measure whole-model training steps on the local device (the ground truth of whole-model prediction)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from torch import nn

from prenet.measurement.steps import timed_optimizer, unpack_example
from prenet.measurement.timer import Timing, time_callable


def training_step(module: nn.Module, example_batch: Any, optimizer: str, opt: torch.optim.Optimizer | None = None, precision: str = "fp32"):
    """One step as prenet predicts it: forward, scalar loss (:func:`prenet.ops.training_loss`), backward, optimizer step.
    Batch norm and dropout in train mode. ``opt``: an existing optimizer over ``module``'s parameters (default: a new one
    of kind ``optimizer``). ``precision`` ``bf16``/``fp16``: forward and loss under ``torch.autocast`` of the module's device."""
    from prenet.ops import training_loss
    from prenet.ops.trace import LOW_DTYPE

    inputs, labels = unpack_example(example_batch)
    module.train()
    opt = opt if opt is not None else timed_optimizer(optimizer, module.parameters())
    dev = inputs.device.type
    low = LOW_DTYPE.get(precision)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=low, enabled=low is not None):
            loss = training_loss(module(inputs), labels)
        loss.backward()
        opt.step()

    return step


def to_device(module: nn.Module, example_batch: Any, device: str) -> tuple[nn.Module, Any]:
    """``module`` and its example batch (a tensor or an (inputs, labels) tuple) moved to ``device``."""
    inputs, labels = unpack_example(example_batch)
    module = module.to(device)
    return module, (inputs.to(device) if labels is None else (inputs.to(device), labels.to(device)))


def measure_model(
    module: nn.Module,
    example_batch: Any,
    *,
    optimizer: str = "sgd",
    warmup: int = 1,
    repeats: int = 3,
    min_block_ms: float = 1.0,
    warmed_ms: float | None = None,
    precision: str = "fp32",
    warmup_ms: float = 0.0,
) -> Timing:
    """Median wall time of one steady-state training step (ms) and its run-to-run spread. ``warmed_ms``: a step of this
    model already ran (e.g. the memory measurement) and took about this long — no further warm-up step is made unless
    the warm-up so far is shorter than ``warmup_ms`` (ms; :func:`~prenet.measurement.timer.time_callable`)."""
    p = next(module.parameters(), None)
    sync = torch.cuda.synchronize if p is not None and p.is_cuda else None
    return time_callable(
        training_step(module, example_batch, optimizer, precision=precision),
        warmup=warmup,
        repeats=repeats,
        min_block_ms=min_block_ms,
        sync=sync,
        warmed_ms=warmed_ms,
        warmup_ms=warmup_ms,
    )


def model_timing_schema() -> dict:
    """polars dtypes of a model-timing row (polars imported here, so measuring needs only torch)."""
    import polars as pl

    return {
        "model": pl.String,
        "batch_size": pl.Int64,
        "optimizer": pl.String,
        "hardware_id": pl.String,
        "threads": pl.Int64,
        "torch_version": pl.String,
        "dtype": pl.String,
        "params": pl.Int64,
        "measured_ms": pl.Float64,
        "spread_rel": pl.Float64,
        "repeats": pl.Int64,
        "measured_at": pl.String,
        "peak_memory_bytes": pl.Int64,
        "probe_ms": pl.Float64,
    }


def model_timing_row(
    name: str,
    batch_size: int,
    optimizer: str,
    hardware_id: str,
    threads: int,
    params: int,
    t: Timing,
    peak_memory_bytes: int | None = None,
    probe_ms: float | None = None,
) -> dict[str, Any]:
    """One row of :func:`model_timing_schema`; ``probe_ms``: the host-speed probe timed just before (ms)."""
    return {
        "model": name,
        "batch_size": batch_size,
        "optimizer": optimizer,
        "hardware_id": hardware_id,
        "threads": threads,
        "torch_version": torch.__version__.split("+")[0],
        "dtype": "float32",
        "params": params,
        "measured_ms": t.median_ms,
        "spread_rel": t.spread_rel,
        "repeats": t.repeats,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "peak_memory_bytes": peak_memory_bytes,
        "probe_ms": probe_ms,
    }


def null_step_ms(optimizer: str = "sgd", repeats: int = 7, device: str = "cpu") -> float:
    """Per-step overhead (ms): a full training step of a 2-parameter model (zero_grad, forward, loss, backward,
    optimizer step) — the fixed cost a step pays beyond its layers."""
    module = nn.Linear(1, 1).to(device)
    return measure_model(module, torch.ones(1, 1, device=device), optimizer=optimizer, warmup=5, repeats=repeats, min_block_ms=5.0).median_ms


def _issue_probes() -> list[tuple[str, nn.Module, tuple[torch.Tensor, torch.Tensor]]]:
    """Training steps of many tiny layers, whose time is mostly the host's: chains of Linear + ReLU (100 of width 16 on
    2 samples, 50 of width 32 on 8) and of BatchNorm + ReLU (30 of 8 channels on two 8×8 samples): a layer with
    parameters and its activation, as most models call them (a parameter-free call costs less: 60 ReLUs, 2.4-3.4 µs each).
    No convolution: a small oneDNN convolution's time in a step moved 21-71 µs per call beyond its in-place time from one
    measurement to the next (2026-12-07), an op's effect this host cost would blur, not the host's."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)

    def probe(layers: list[nn.Module], x: torch.Tensor) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
        m = nn.Sequential(*layers, nn.Flatten(), nn.LazyLinear(4))
        with torch.no_grad():
            m(x)  # materializes the lazy head
        return m, (x, torch.randint(0, 4, (x.shape[0],), generator=g))

    return [
        ("linear 100 x 16, batch 2", *probe([x for _ in range(100) for x in (nn.Linear(16, 16), nn.ReLU())], torch.randn(2, 16, generator=g))),
        ("linear 50 x 32, batch 8", *probe([x for _ in range(50) for x in (nn.Linear(32, 32), nn.ReLU())], torch.randn(8, 32, generator=g))),
        (
            "batchnorm 30 x 8 ch, 8 px, batch 2",
            *probe([x for _ in range(30) for x in (nn.BatchNorm2d(8), nn.ReLU())], torch.randn(2, 8, 8, 8, generator=g)),
        ),
    ]


def module_call_ms(optimizer: str = "sgd", repeats: int = 7) -> dict[str, Any]:
    """The host's cost per module call of a CPU training step (ms), beyond its ops' own time as the op benchmark times
    them in place (:func:`prenet.ops.trace.measure_step`): Python's module calls, autograd's graph and engine, the
    optimizer's loop over the parameters. Measured on :func:`_issue_probes` (steps of many tiny layers) as (whole step −
    its ops timed in place − the null step) ÷ its module calls (:func:`prenet.ops.records.module_calls`), the lower of
    two measurements of each probe; ``ms`` is the median over the probes, ``probes`` each one's (~4 s in all). On this
    AMD EPYC, one thread (2026-12-07): 9.5-10.8 µs per call, the probes 9-18 (2-4 µs
    per ATen op, but a GRU's per-timestep ops, issued by one call, cost far less: counted per op, the zoo's GRU tagger
    was answered 13 % too slow); answered without it, steps of such layers were ~50 % too fast."""
    from prenet.ops.records import module_calls
    from prenet.ops.trace import measure_step

    null = null_step_ms(optimizer, repeats=repeats)
    per = {}
    for name, module, batch in _issue_probes():
        gaps = []
        for _ in range(2):  # the lower of two: a burst of load on a shared host lifts one measurement, rarely both
            whole = measure_model(module, batch, optimizer=optimizer, warmup=3, repeats=repeats, min_block_ms=20.0).median_ms
            ops = measure_step(module, batch, optimizer=optimizer, min_block_ms=0.3, repeats=5).records
            gaps.append(max(whole - sum(r.measured_ms or 0.0 for r in ops) - null, 0.0) / max(module_calls(ops), 1))
        per[name] = min(gaps)
    return {"ms": float(np.median(list(per.values()))), "probes": per}


#: The convolutions of :func:`conv_sequence_share`: 3×3, as a ResNet's stages (channels, pixels a side) at batch 16.
CONV_SEQUENCE_PROBE = ((64, 16), (64, 16), (128, 8), (128, 8), (256, 4), (256, 4))


def conv_sequence_share(precision: str = "fp32", repeats: int = 11, rounds: int = 3, batch: int = 16) -> dict[str, Any]:
    """How much longer a CPU's convolutions take in a step, one after another, than each repeated in place as the op
    benchmark times them: (a pass of :data:`CONV_SEQUENCE_PROBE`'s convolutions, forward and backward, in turn) ÷ (the
    sum of each one's pass repeated alone) − 1, each the median of ``repeats``; ``share`` is the median over ``rounds``
    such readings (``rounds``: each), in ``precision``'s dtype (``bf16``: the convolutions in BF16). Measured on an Intel
    Xeon with AMX, one thread (2026-12-07): BF16 +0.50-0.61 ms a convolution at batch 16 (+18 %; +0.15-0.19 at batch 4,
    +1.2-1.7 at 48: it grows with the data), FP32 +5-7 %; a 64 MB cache flush between repeats costs less, and every
    oneDNN primitive is a cache hit: the backward's operands are not where a repeat leaves them. ~3 s in FP32."""
    import statistics

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    g = torch.Generator().manual_seed(0)
    convs = [nn.Conv2d(c, c, 3, padding=1).to(dtype) for c, _ in CONV_SEQUENCE_PROBE]
    xs = [torch.randn(batch, c, s, s, generator=g).to(dtype).requires_grad_() for c, s in CONV_SEQUENCE_PROBE]
    grads = [torch.ones(batch, c, s, s, dtype=dtype) for c, s in CONV_SEQUENCE_PROBE]

    def one(i: int) -> None:
        convs[i](xs[i]).backward(grads[i])

    def median_ms(fn) -> float:  # two warm-up calls, then the median of ``repeats`` single calls
        return time_callable(fn, warmup=2, repeats=repeats, min_block_ms=0.0).median_ms

    shares = []
    for _ in range(rounds):
        hot = sum(median_ms(lambda i=i: one(i)) for i in range(len(convs)))
        seq = median_ms(lambda: [one(i) for i in range(len(convs))])
        shares.append(seq / hot - 1.0)
    return {"share": max(0.0, float(statistics.median(shares))), "rounds": [round(s, 4) for s in shares]}
