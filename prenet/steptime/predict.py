"""Whole-model step time: walk the model into layers, predict each layer on the target hardware, sum.

    step = Σ over layers of the layer's training time + per-step overhead

where a layer with parameters contributes its measured-direction ``train_step`` (forward + backward + its
share of the optimizer update) and a parameter-free layer its ``forward_backward``. The loss is a layer too
(cross-entropy when the output is logits and labels are given; otherwise the mean of the output, which costs
nothing measurable).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import polars as pl
import torch
from torch import nn

from prenet.errors import PrenetError
from prenet.graph import LayerCall, trace
from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS, REGISTRY
from prenet.measurement.steps import unpack_example  # noqa: F401  (re-exported)
from prenet.ops.trace import classifies
from prenet.steptime.features import featurize
from prenet.steptime.model import StepTimeModel


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


def predict_step_time(
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


def load_model_function(spec: str) -> Callable[..., Any]:
    """``path/to/file.py:function`` → the function (errors name the file and what went wrong)."""
    if ":" not in spec:
        raise PrenetError(f"{spec!r}: expected a zoo name or path/to/file.py:function")
    path_s, fn_name = spec.rsplit(":", 1)
    path = Path(path_s)
    if not path.is_file():
        raise PrenetError(f"model file {path} does not exist")
    mod_spec = importlib.util.spec_from_file_location(f"prenet_user_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as e:  # noqa: BLE001 - any import failure becomes one clear message
        raise PrenetError(f"model file {path} failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise PrenetError(f"model file {path} has no function {fn_name!r}")
    return fn


def build_model(spec: str, batch_size: int, zoo_kwargs: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """A zoo name or ``file.py:function``, called with ``batch_size=N`` when it accepts it; must return
    ``(module, example_batch)``. Zoo models are built on the meta device (no weight memory) unless ``meta`` is
    False, with the builder keywords ``zoo_kwargs`` (e.g. ``{"image_size": 224}``)."""
    from prenet.zoo import ZOO

    if spec in ZOO:
        try:
            if meta:
                with torch.device("meta"):
                    return ZOO[spec](batch_size=batch_size, **(zoo_kwargs or {}))
            return ZOO[spec](batch_size=batch_size, **(zoo_kwargs or {}))
        except TypeError as e:
            params = [p for p in inspect.signature(ZOO[spec]).parameters if p != "batch_size"]
            raise PrenetError(f"zoo model {spec!r} does not take {zoo_kwargs}: {e}; its sizes are {', '.join(params)}") from e
    if zoo_kwargs:
        raise PrenetError(f"--zoo-arg applies to zoo models only; {spec} is a file model (set its sizes in the file)")
    fn = load_model_function(spec)
    accepts = "batch_size" in inspect.signature(fn).parameters
    try:
        result = fn(batch_size=batch_size) if accepts else fn()
    except Exception as e:  # noqa: BLE001
        raise PrenetError(f"{spec} raised {type(e).__name__}: {e}") from e
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module)):
        raise PrenetError(f"{spec} must return (module, example_batch), got {type(result).__name__}")
    unpack_example(result[1])
    return result


LAYER_CSV_REQUIRED = ("op", "direction", "dtype")


#: ``dtype`` cells of the layer CSV → precisions (``float32`` means strict FP32, as ``fp32``).
DTYPE_PRECISION = {"float32": "fp32", "fp32": "fp32", "tf32": "tf32", "float16": "fp16", "fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16"}


@dataclass(frozen=True)
class LayerRow:
    """One valid row of a layer table: the op, its completed shape, direction, optimizer and precision."""

    op: str
    shape: dict[str, int]
    direction: str
    optimizer: str
    precision: str


def parse_layer_table(table: pl.DataFrame) -> list[LayerRow]:
    """Validate a layer table (the ``prenet predict layers`` CSV format): ``op`` (a registered op), that op's shape columns
    (e.g. ``linear``: ``batch, in_features, out_features``; ``conv2d``: ``batch, in_channels, out_channels, kernel_size,
    input_size, stride, padding``), ``direction`` (``forward | forward_backward | train_step``), ``dtype`` (``float32`` /
    ``fp32``, ``tf32``, ``float16`` / ``fp16``, ``bfloat16`` / ``bf16``) and, optionally, ``optimizer`` (``sgd | adam``, for
    ``train_step``; default ``sgd``). Every invalid cell is reported (row numbers count data rows from 1) in one error."""
    problems: list[str] = []
    missing = [c for c in LAYER_CSV_REQUIRED if c not in table.columns]
    if missing:
        raise PrenetError(f"layer table lacks column(s) {', '.join(missing)}; required: {', '.join(LAYER_CSV_REQUIRED)} and the op's shape columns")
    if table.height == 0:
        raise PrenetError("the layer table has a header but no rows: add one row per layer to predict")
    rows = []
    for i, r in enumerate(table.iter_rows(named=True), start=1):
        op = r["op"]
        if op not in REGISTRY:
            problems.append(f"row {i}, column op: unknown op {op!r} (known: {', '.join(sorted(REGISTRY))})")
            continue
        lt = REGISTRY[op]
        shape = {}
        for c in lt.shape_columns:
            v = r.get(c)
            try:
                iv = int(v)
                ok = iv == float(v) and iv >= (0 if c == "padding" else 1)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(f"row {i}, column {c}: {op} needs a {'non-negative' if c == 'padding' else 'positive'} integer, got {v!r}")
            else:
                shape[c] = iv
        direction = r["direction"]
        if direction not in ("forward", "forward_backward", "train_step"):
            problems.append(f"row {i}, column direction: {direction!r} is not forward, forward_backward or train_step")
        precision = DTYPE_PRECISION.get(str(r["dtype"]))
        if precision is None:
            problems.append(f"row {i}, column dtype: {r['dtype']!r} is not one of {', '.join(DTYPE_PRECISION)}")
        optimizer = (r.get("optimizer") or "sgd") if direction == "train_step" else "none"
        if optimizer not in ("none", "sgd", "adam"):
            problems.append(f"row {i}, column optimizer: {optimizer!r} is not sgd or adam")
        if len(shape) == len(lt.shape_columns):
            full = lt.complete(shape)
            if op in ("conv2d", "maxpool2d", "avgpool2d") and full.get("output_size", 1) < 1:
                problems.append(f"row {i}: the {op} output is empty (kernel larger than the padded input)")
            elif precision is not None:
                rows.append(LayerRow(op, full, direction, optimizer, precision))
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise PrenetError("invalid layer table:\n  " + "\n  ".join(problems[:20]) + more)
    return rows


def predict_layers(table: pl.DataFrame, *, hardware: HardwareSpec, model: Any) -> pl.DataFrame:
    """Predict each row of a layer table (:func:`parse_layer_table`) on ``hardware`` through the one step-time path: the
    layer is built on the meta device and its ``direction`` traced (forward under no_grad; forward_backward = forward and
    backward to weights and input; train_step = that plus the optimizer step), so train_step ≥ forward_backward ≥ forward
    for every layer. ``model``: the op-level :class:`~prenet.steptime.efficiency.EfficiencyModel` or its folder (read after
    the table is validated). Returns the input plus ``predicted_ms``."""
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import device_type, predict_trace

    rows = parse_layer_table(table)
    if not isinstance(model, EfficiencyModel):
        model = EfficiencyModel.load(model)
    out = []
    for r in rows:
        with torch.device("meta"):
            module, x = REGISTRY[r.op].build(r.shape, "meta", torch.float32)
        trace = trace_step(
            module,
            x,
            optimizer=r.optimizer if r.optimizer != "none" else "sgd",
            precision=r.precision,
            device_type=device_type(hardware),
            direction=r.direction,
            input_grad=True,
        )
        pred, _ = predict_trace(trace, hardware, model)
        out.append(pred.step_seconds * 1e3)
    return table.with_columns(pl.Series("predicted_ms", out))
