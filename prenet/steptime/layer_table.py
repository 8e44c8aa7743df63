"""The layer table of ``prenet predict layers``: one layer per row (op, shape columns, direction, dtype, optimizer),
validated in one pass and predicted through the one step-time path (:mod:`prenet.steptime.step`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import polars as pl
import torch

from prenet.errors import PrenetError
from prenet.hardware.spec import HardwareSpec
from prenet.layers import REGISTRY
from prenet.names import LAYER_OPTIMIZERS, OPTIMIZERS

LAYER_CSV_REQUIRED = ("op", "direction", "dtype")


#: ``dtype`` cells of the layer CSV → precisions (``float32`` means ``fp32``: FP32 as torch runs it, so on a GPU with TF32
#: units a convolution runs on them, between cuDNN's layout transposes).
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
    ``fp32``, ``tf32``, ``float16`` / ``fp16``, ``bfloat16`` / ``bf16``) and, optionally, ``optimizer`` (one of :data:`prenet.names.OPTIMIZERS`, for
    ``train_step``; default ``sgd``). Every invalid cell is reported (row numbers count data rows from 1) in one error."""
    problems: list[str] = []
    missing = [c for c in LAYER_CSV_REQUIRED if c not in table.columns]
    if missing:
        raise PrenetError(f"layer table lacks column(s) {', '.join(missing)}; required: {', '.join(LAYER_CSV_REQUIRED)} and the op's shape columns")
    if table.height == 0:
        raise PrenetError("the layer table has a header but no rows: add one row per layer to predict")
    rows = []
    unused: list[int] = []  # rows whose optimizer cell has no step to act on
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
                got = "the cell is empty" if v is None or (isinstance(v, str) and not v.strip()) else f"got {v!r}"
                problems.append(f"row {i}, column {c}: {op} needs a {'non-negative' if c == 'padding' else 'positive'} integer, {got}")
            else:
                shape[c] = iv
        direction = r["direction"]
        if direction not in ("forward", "forward_backward", "train_step"):
            problems.append(f"row {i}, column direction: {direction!r} is not forward, forward_backward or train_step")
        precision = DTYPE_PRECISION.get(str(r["dtype"]))
        if precision is None:
            problems.append(f"row {i}, column dtype: {r['dtype']!r} is not one of {', '.join(DTYPE_PRECISION)}")
        given = r.get("optimizer")
        optimizer = (given or "sgd") if direction == "train_step" else "none"
        if optimizer not in LAYER_OPTIMIZERS or (given and given not in LAYER_OPTIMIZERS):
            problems.append(f"row {i}, column optimizer: {given or optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        elif given and given != "none" and direction != "train_step":
            unused.append(i)
        if len(shape) == len(lt.shape_columns):
            full = lt.complete(shape)
            if op in ("conv2d", "maxpool2d", "avgpool2d") and full.get("output_size", 1) < 1:
                problems.append(f"row {i}: the {op} output is empty (kernel larger than the padded input)")
            elif precision is not None:
                rows.append(LayerRow(op, full, direction, optimizer, precision))
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise PrenetError("invalid layer table:\n  " + "\n  ".join(problems[:20]) + more)
    if unused:
        shown = ", ".join(map(str, unused[:10])) + (f" and {len(unused) - 10} more" if len(unused) > 10 else "")
        warnings.warn(
            f"layer table row(s) {shown}: an optimizer is given on a forward or forward_backward row, which has no optimizer "
            "step; it is not used there (direction train_step times the step with it)",
            stacklevel=4,  # parse_layer_table <- predict_layers <- prenet.api.predict_layers <- the caller
        )
    return rows


def predict_layers(table: pl.DataFrame, *, hardware: HardwareSpec, model: Any, threads: int = 1, host_speed: str | None = None) -> pl.DataFrame:
    """Predict each row of a layer table (:func:`parse_layer_table`) on ``hardware`` through the one step-time path: the
    layer is built on the meta device and its ``direction`` traced (forward under no_grad; forward_backward = forward and
    backward to weights and input; train_step = that plus the optimizer step), so train_step ≥ forward_backward ≥ forward
    for every layer. ``model``: the op-level :class:`~prenet.steptime.efficiency.EfficiencyModel` or its folder (read after
    the table is validated); ``threads``: the CPU threads a CPU step runs on; ``host_speed``: this very CPU answered at
    its speed now or as recorded (:meth:`~prenet.steptime.efficiency.EfficiencyModel.at_host_speed`). Returns the input
    plus ``predicted_ms``."""
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel, UnsupportedPrecisionError
    from prenet.steptime.step import device_type, predict_trace

    rows = parse_layer_table(table)
    if not isinstance(model, EfficiencyModel):
        model = EfficiencyModel.load(model)
    model.at_host_speed(hardware, host_speed)
    out, problems = [], []
    for i, r in enumerate(rows, start=1):
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
            threads=threads,
        )
        # a layer's time is its kernels' (the host's issue time is a whole step's: prenet.steptime.host)
        try:
            pred, _ = predict_trace(trace, hardware, model, host=False)
        except UnsupportedPrecisionError as e:  # the table's dtype column chose it, not a --precision flag: every such row
            problems.append(f"row {i}, column dtype ({r.precision}): " + str(e).split(" (choose another")[0])
            continue
        out.append(pred.step_seconds * 1e3)
    if problems:  # all of them, as parse_layer_table reports the table's other bad cells
        fix = "give those rows another dtype, e.g. fp32" if len(problems) > 1 else "give that row another dtype, e.g. fp32"
        raise UnsupportedPrecisionError(
            (f"{problems[0]}; {fix}" if len(problems) == 1 else "invalid layer table:\n  " + "\n  ".join(problems[:20]) + f"\n{fix}")
        )
    return table.with_columns(pl.Series("predicted_ms", out))
