"""A multi-GPU job's answer: the one-GPU prediction of :mod:`prenet.steptime.step` turned into the step of a layout
(:mod:`prenet.parallel.data_parallel`), with the notes a user needs (links assumed, fits missing)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polars as pl

from prenet.hardware.spec import HardwareSpec
from prenet.ops.records import StepTrace
from prenet.parallel.data_parallel import Layout, OneGpuStep, ParallelStep, check_layout, multi_gpu_step
from prenet.parallel.interconnect import interconnect
from prenet.parallel.model import ParallelModel
from prenet.paths import default_path
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.step import StepPrediction, default_overhead_ms, predict_trace, set_epoch


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> ParallelModel:
    return ParallelModel.load(path)


def load_model(path: str | Path | None = None) -> ParallelModel:
    """The trained multi-GPU model at ``path`` (default: ``paths.models_parallel``, read when called), read once per file
    version (a plan asks for it per GPU)."""
    p = default_path("models_parallel", path)
    return _load(str(p), p.stat().st_mtime if p.is_file() else 0.0)


def layout_step(
    pred: StepPrediction, ops: pl.DataFrame, trace: StepTrace, hw: HardwareSpec, layout: Layout, op_model: EfficiencyModel, model: ParallelModel
) -> ParallelStep:
    """The step of ``layout`` from the one-GPU prediction ``pred`` and its op table ``ops``; its notes say which links
    were assumed and which constants were not fitted."""
    ic = interconnect(hw)
    notes = check_layout(layout, ic, hw.hardware_id, heads=trace.heads if layout.strategy == "tp" else None)
    one_gpu_ms = pred.step_seconds * 1e3 - pred.overhead_ms
    one = OneGpuStep(ops, trace.grad_params, trace.params, one_gpu_ms, trace.precision, op_model.host_ms.get(hw.kind, 0.0), trace.grad_accum)
    if layout.strategy == "tp":
        from prenet.parallel.tensor_parallel import tp_step

        step = tp_step(one, trace.blocks, layout, ic, model, act_bytes=2 if trace.precision in ("fp16", "bf16") else 4)
    else:
        step = multi_gpu_step(one, layout, ic, model)
    step.compute_ms += pred.overhead_ms
    step.notes[:0] = [*notes, f"GPUs joined by {ic.describe()}"]
    if not model.collectives.fitted(ic.link) or (layout.nodes > 1 and not model.collectives.fitted("network")):
        step.notes.append(f"collectives not fitted on measurements for this link: {model.collectives.source}")
    if not model.residual.share_at_8:
        step.notes.append("no learned synchronisation residual (run `dvc repro train_parallel`): the step holds the collectives only")
    return step


def predict_parallel(
    trace: StepTrace,
    hw: HardwareSpec,
    op_model: EfficiencyModel,
    layout: Layout,
    *,
    overhead_ms: float | None = None,
    dataset_size: int | None = None,
    model: ParallelModel | None = None,
) -> StepPrediction:
    """:func:`prenet.steptime.step.predict_traced` for a job on ``layout``: ``step_seconds`` is the multi-GPU step,
    ``parallel`` holds its parts, and an epoch is split over the data-parallel GPUs."""
    ovh = default_overhead_ms(hw, trace.optimizer) if overhead_ms is None else overhead_ms
    pred, ops = predict_trace(trace, hw, op_model, overhead_ms=ovh)
    step = layout_step(pred, ops, trace, hw, layout, op_model, model or load_model())
    pred.step_seconds = step.step_ms / 1e3
    pred.parallel = step.to_dict()
    pred.notes.extend(step.notes)
    set_epoch(pred, trace, dataset_size, layout.data_parallel)
    return pred
