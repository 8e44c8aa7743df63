"""The vendored GPU timings as measured ops: each row's call traced on the meta device into the op records of
:mod:`prenet.ops` (same FLOPs, bytes and GEMM view as a traced model), with the row's latency as ``measured_ms``.

NeuSight 2025 (PyTorch, strict FP32, forward): ``nn.Linear`` → ``addmm``, ``torch.bmm``, ``nn.Conv2d`` (no bias) →
``convolution``, layer norm, softmax, and the elementwise ops (binary ``add, mul, div, pow``; unary ``relu, gelu,
tanh``; ``addu, mulu, divu, powu`` = the op with a Python scalar). Justus et al. 2018 (TensorFlow 1, FP32) forward
rows (optimizer code 0): dense → ``addmm``, Conv2D → ``convolution`` (bias and activation are part of the timed
layer: those rows carry ``tf1 = 1``, a feature set to 0 when predicting PyTorch work).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import polars as pl
import torch
import torch.nn.functional as F

from prenet.data.external import load_justus_conv, load_justus_dense, load_neusight_conv, load_neusight_linear
from prenet.hardware.catalog import resolve_name
from prenet.ops.records import OP_SCHEMA
from prenet.ops.trace import trace_call
from prenet.paths import data_dir

_HASH_SEED = 20250101
_RECORD_COLS = [k for k in OP_SCHEMA if k not in ("measured_ms", "spread_rel")]

_UNARY: dict[str, Callable] = {"relu": torch.relu, "gelu": F.gelu, "tanh": torch.tanh, "addu": lambda x: x + 1.0,
                               "mulu": lambda x: x * 1.5, "divu": lambda x: x / 1.5, "powu": lambda x: x ** 2}
_BINARY: dict[str, Callable] = {"add": torch.add, "mul": torch.mul, "div": torch.div, "pow": torch.pow}


def _m(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


def _call(kind: str, s: dict) -> tuple[Callable, tuple]:
    """The call a row measured, on meta tensors of its shapes."""
    if kind == "linear":
        return F.linear, (_m(s["batch"], s["in_features"]), _m(s["out_features"], s["in_features"]), _m(s["out_features"]))
    if kind == "conv2d":
        x = _m(s["batch"], s["in_channels"], s["input_size"], s["input_size"])
        w = _m(s["out_channels"], s["in_channels"], s["kernel_size"], s["kernel_size"])
        return (lambda a, b: F.conv2d(a, b, None, s["stride"], s["padding"])), (x, w)
    if kind == "bmm":
        return torch.bmm, (_m(s["B"], s["M"], s["N"]), _m(s["B"], s["N"], s["K"]))
    if kind == "ln":
        return (lambda x: F.layer_norm(x, (s["H"],))), (_m(s["B"], s["H"]),)
    if kind == "softmax":
        return (lambda x: torch.softmax(x, -1)), (_m(s["B"], s["H"]),)
    if kind in _BINARY:
        return _BINARY[kind], (_m(s["B"], s["H"]), _m(s["B"], s["H"]))
    return _UNARY[kind], (_m(s["B"], s["H"]),)


def _ops_of(rows: pl.DataFrame, kind: str, shape_cols: list[str]) -> pl.DataFrame:
    """Trace each distinct shape once; join the op record (the largest op of the call) back to every row. The shape
    columns are dropped afterwards (they are in ``config_id``): names like ``batch`` mean other things in an op record."""
    keys = [f"_s_{c}" for c in shape_cols]
    shapes = rows.select(shape_cols).unique(maintain_order=True)
    recs = []
    for s in shapes.iter_rows(named=True):
        fn, args = _call(kind, s)
        main = max(trace_call(fn, *args), key=lambda r: (r.flops, r.bytes))
        recs.append([*s.values(), *(getattr(main, k) for k in _RECORD_COLS)])
    table = pl.DataFrame(recs, schema={**{k: pl.Int64 for k in keys}, **{k: OP_SCHEMA[k] for k in _RECORD_COLS}}, orient="row")
    renamed = rows.rename(dict(zip(shape_cols, keys)))
    return renamed.join(table, on=keys, how="inner").drop(keys)


def _cap(df: pl.DataFrame, cols: list[str], max_rows_per_gpu: int | None) -> pl.DataFrame:
    if max_rows_per_gpu is None:
        return df
    h = pl.concat_list([pl.col(c).cast(pl.Int64) for c in cols]).hash(seed=_HASH_SEED)
    return (df.with_columns(h.alias("_h")).sort(["hardware_id", "_h"])
            .with_columns(pl.col("_h").rank("dense").over("hardware_id").alias("_r"))
            .filter(pl.col("_r") <= max_rows_per_gpu).drop("_h", "_r"))


def _finish(df: pl.DataFrame, source: str, kind: str, cols: list[str]) -> pl.DataFrame:
    keyed = df.with_columns(pl.lit(source).alias("source"), pl.lit(kind).alias("kind"), pl.lit(1 if source == "justus2018" else 0, dtype=pl.Int64).alias("tf1"),
                            pl.concat_str([pl.lit(kind)] + [pl.col(c).cast(pl.String) for c in cols], separator=",").alias("config_id"))
    return _ops_of(keyed, kind, cols).select("source", "kind", "hardware_id", "config_id", "tf1", *[c for c in OP_SCHEMA if c != "spread_rel"])


def load_gpu_ops(max_rows_per_gpu: int | None = 600, root: Path | None = None) -> pl.DataFrame:
    """Every vendored GPU forward timing as one op row (``hardware_id`` = catalog name, ``measured_ms``, ``config_id``
    = the shape: rows of one shape on different GPUs share it, so the frozen split keeps a shape out everywhere)."""
    base = root or data_dir()
    frames = []
    for loader, kind, cols, source in ((load_neusight_linear, "linear", ["batch", "in_features", "out_features"], "neusight2025"),
                                       (load_justus_dense, "linear", ["batch", "in_features", "out_features"], "justus2018"),
                                       (load_neusight_conv, "conv2d", ["batch", "in_channels", "out_channels", "kernel_size", "input_size", "stride", "padding"], "neusight2025"),
                                       (load_justus_conv, "conv2d", ["batch", "in_channels", "out_channels", "kernel_size", "input_size", "stride", "padding"], "justus2018")):
        raw = loader(None, base).filter(pl.col("direction") == "forward").select("hardware_id", *cols, pl.col("time_ms").alias("measured_ms"))
        raw = _cap(raw, cols, max_rows_per_gpu)
        frames.append(_finish(raw, source, kind, cols))
    frames += _neusight_rows(base, NEUSIGHT_TRAIN, max_rows_per_gpu)
    return pl.concat(frames, how="vertical_relaxed")


#: NeuSight's op files (forward, strict FP32) by kind: ``linear`` and ``bmm`` (B, M, N, K), and the [B, H] row-wise
#: files, whose ``OPName`` column names the op. The training set covers P4, P100, T4, V100 and A100 40GB; the test set
#: (``scripts/vendor_neusight_test.py``) its other three GPUs, whose FP32 GEMM and row-wise ops no prenet model is fitted
#: on (the H100's BF16/TF32 matmul kernels from XLA's table and the A100 80GB PCIe's convolutions are).
NEUSIGHT_TRAIN = {"bmm": "bmm_5gpu.csv.gz", "rowwise": ("layernorm_5gpu.csv.gz", "softmax_5gpu.csv.gz", "elementwise_5gpu.csv.gz")}
NEUSIGHT_TEST = {
    "linear": "test_linear_3gpu.csv.gz",
    "bmm": "test_bmm_3gpu.csv.gz",
    "rowwise": ("test_layernorm_3gpu.csv.gz", "test_softmax_3gpu.csv.gz", "test_elementwise_3gpu.csv.gz"),
}


def _neusight_rows(base: Path, files: dict, max_rows_per_gpu: int | None) -> list[pl.DataFrame]:
    """Op rows of NeuSight's ``files`` (:data:`NEUSIGHT_TRAIN` or :data:`NEUSIGHT_TEST`) under data folder ``base``: a
    ``linear`` file as :func:`~prenet.data.external.load_neusight_linear` reads it (dense layers of batch B·M), ``bmm``
    and each row-wise op as traced; devices as catalog names, one row per (GPU, shape) at the median latency."""
    ns = base / "external" / "neusight2025"
    parts = []
    if "linear" in files:
        cols = ["batch", "in_features", "out_features"]
        lin = load_neusight_linear(None, base, file=files["linear"]).select("hardware_id", *cols, pl.col("time_ms").alias("measured_ms"))
        parts.append(("linear", lin, cols))
    bmm = pl.read_csv(ns / files["bmm"]).select(pl.col("Device").alias("hardware_id"), "B", "M", "N", "K", pl.col("latency_ms").alias("measured_ms"))
    parts.append(("bmm", bmm, ["B", "M", "N", "K"]))
    for name in files["rowwise"]:
        t = pl.read_csv(ns / name)
        for op in t.get_column("OPName").unique().sort().to_list():
            sub = t.filter(pl.col("OPName") == op).select(pl.col("Device").alias("hardware_id"), "B", "H", pl.col("latency_ms").alias("measured_ms"))
            parts.append((op, sub, ["B", "H"]))
    frames = []
    for kind, raw, cols in parts:
        raw = raw.with_columns(pl.col("hardware_id").replace_strict({n: resolve_name(n) for n in raw.get_column("hardware_id").unique().to_list()}))
        raw = raw.group_by(["hardware_id", *cols], maintain_order=True).agg(pl.col("measured_ms").median()).filter(pl.col("measured_ms") > 0)
        raw = _cap(raw, cols, max_rows_per_gpu)
        frames.append(_finish(raw, "neusight2025", kind, cols))
    return frames


def load_unseen_gpu_ops(root: Path | None = None) -> pl.DataFrame:
    """NeuSight's op-level test set on the GPUs whose FP32 GEMM and row-wise ops no prenet model is fitted on (L4; H100
    SXM5, with training rows for its BF16/TF32 matmul kernels only; A100 80GB PCIe, for its convolutions only): one op
    row per (GPU, shape), as :func:`load_gpu_ops` gives them."""
    return pl.concat(_neusight_rows(root or data_dir(), NEUSIGHT_TEST, None), how="vertical_relaxed")
