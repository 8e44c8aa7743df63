"""Operators of a training step: families, FLOPs and bytes (families), mixed precision on meta (autocast),
the ATen-level trace of a whole step (trace)."""

from prenet.names import FAMILIES
from prenet.ops.trace import OPTIMIZERS, PRECISIONS, OpRecord, StepTrace, measure_step, trace_step, training_loss

__all__ = ["FAMILIES", "OPTIMIZERS", "PRECISIONS", "OpRecord", "StepTrace", "measure_step", "trace_step", "training_loss"]
