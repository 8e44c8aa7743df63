"""The PreNeT layer recipe's whole-model step time (the seed method's measured baseline; the answer users get is the
op-level path of :mod:`prenet.steptime.step`): walk the model into layers, predict each layer on the target hardware, sum.

    step = Σ over layers of the layer's training time + per-step overhead

where a layer with parameters contributes its measured-direction ``train_step`` (forward + backward + its
share of the optimizer update) and a parameter-free layer its ``forward_backward``. The loss is a layer too
(cross-entropy when the output is logits and labels are given; otherwise the mean of the output, which costs
nothing measurable).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl
import torch
from torch import nn

from prenet.errors import PrenetError
from prenet.graph import LayerCall, trace
from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS, REGISTRY
from prenet.measurement.steps import unpack_example
from prenet.ops.trace import classifies
from prenet.recipe.features import featurize
from prenet.recipe.model import StepTimeModel


@dataclass
class StepTimePrediction:
    """Predicted time of one training step (s) and, with a dataset size, of one epoch (s)."""

    step_seconds: float
    hardware: dict[str, Any]
    optimizer: str
    batch_size: int | None
    layers: list[dict[str, Any]] = field(default_factory=list)
    overhead_ms: float = 0.0
    epoch_seconds: float | None = None
    steps_per_epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_calls(module: nn.Module, example_batch: Any) -> list[LayerCall]:
    """The layer calls of one training step: the forward pass plus the loss."""
    inputs, labels = unpack_example(example_batch)
    calls, out = trace(module, inputs)
    if not isinstance(out, torch.Tensor):
        raise PrenetError(f"the model's forward returned {type(out).__name__}; prenet needs a tensor (logits or a value to average)")
    if classifies(out, labels):
        calls.append(
            LayerCall("loss", "cross_entropy", REGISTRY["cross_entropy"].complete({"batch": int(out.shape[0]), "hidden": int(out.shape[1])}))
        )
    return calls


def layer_rows(calls: list[LayerCall], *, hardware: HardwareSpec, optimizer: str, threads: int, dtype: str = "float32") -> pl.DataFrame:
    """One LayerFeatures row per call (no time), in the direction that call contributes to a step."""
    rows = []
    for c in calls:
        trainable = REGISTRY[c.op].trainable
        rows.append(
            _row(c.op, c.shape, "train_step" if trainable else "forward_backward", optimizer if trainable else "none", hardware, threads, dtype)
        )
    return _featurized(rows, hardware)


def _row(
    op: str, shape: dict[str, int], direction: str, optimizer: str, hardware: HardwareSpec, threads: int, dtype: str = "float32"
) -> dict[str, Any]:
    """One raw row to predict (GPU rows carry threads = 0, as in the external training data)."""
    return {
        "source": "predict",
        "hardware_id": hardware.hardware_id,
        "threads": threads if hardware.kind == "cpu" else 0,
        "dtype": dtype,
        "op": op,
        "direction": direction,
        "optimizer": optimizer,
        "activation": "none",
        **{k: shape.get(k) for k in ALL_SHAPE_COLUMNS},
    }


def _featurized(rows: list[dict[str, Any]], hardware: HardwareSpec) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema_overrides={k: pl.Int64 for k in ALL_SHAPE_COLUMNS})
    return featurize(frame, {hardware.hardware_id: hardware})


def predict_recipe_step(
    module: nn.Module,
    example_batch: Any,
    *,
    hardware: HardwareSpec,
    model: StepTimeModel,
    optimizer: str = "sgd",
    threads: int = 1,
    dataset_size: int | None = None,
    overhead_ms: float = 0.0,
) -> StepTimePrediction:
    """Predict the wall time of one training step of ``module`` on ``hardware`` (and of an epoch of
    ``dataset_size`` samples when given)."""
    if optimizer not in ("sgd", "adam"):
        raise PrenetError(f"optimizer must be sgd or adam, got {optimizer!r}")
    calls = step_calls(module, example_batch)
    if not calls:
        raise PrenetError("the model has no layers prenet can time (walked no layer calls)")
    feats = layer_rows(calls, hardware=hardware, optimizer=optimizer, threads=threads)
    ms = model.predict_ms(feats)
    layers = [
        {"name": c.name, "op": c.op, "direction": d, "predicted_ms": float(t), **c.shape} for c, d, t in zip(calls, feats.get_column("direction"), ms)
    ]
    step_s = (float(ms.sum()) + overhead_ms) / 1e3
    inputs, _ = unpack_example(example_batch)
    batch = int(inputs.shape[0]) if inputs.dim() else None
    pred = StepTimePrediction(
        step_seconds=step_s, hardware=hardware.to_dict(), optimizer=optimizer, batch_size=batch, layers=layers, overhead_ms=overhead_ms
    )
    if dataset_size is not None:
        if not batch:
            raise PrenetError("an epoch needs the batch size: the example batch has no batch dimension")
        pred.steps_per_epoch = math.ceil(dataset_size / batch)
        pred.epoch_seconds = pred.steps_per_epoch * step_s
    return pred
