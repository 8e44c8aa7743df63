"""Operators of a training step: families and their FLOP/byte rules (families, accounting), mixed precision on meta
(autocast), the ATen-level trace of a whole step (trace) and what it records (records).

The tracer's names are imported on first use, so ``prenet.ops.families`` and ``prenet.ops.records`` stay torch-free
(a stored trace is predicted without importing torch)."""

from typing import Any

from prenet.names import FAMILIES

__all__ = ["FAMILIES", "OPTIMIZERS", "PRECISIONS", "OpRecord", "StepTrace", "measure_step", "set_tf32", "trace_step", "training_loss"]


def __getattr__(name: str) -> Any:
    if name in ("OpRecord", "StepTrace"):
        from prenet.ops import records

        return getattr(records, name)
    if name in __all__:
        from prenet.ops import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'prenet.ops' has no attribute {name!r}")
