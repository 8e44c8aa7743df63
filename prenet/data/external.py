"""Loaders of the vendored external layer timings (``data/external/``) into prenet's raw-row format.

Each loader returns one row per (GPU, layer shape, direction, optimizer, activation), duplicates reduced to
the median time, with columns ``source, hardware_id, threads (0: not applicable), dtype, op, direction,
optimizer, activation,`` the shape columns, ``time_ms`` and ``spread_rel``. ``hardware_id`` is the canonical
catalog name. ``max_rows_per_gpu`` keeps the shapes with the smallest stable hash (not a random draw), so the
same shapes are kept on every GPU of a paired dataset and adding rows never changes which old ones are kept.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from prenet.errors import PrenetError
from prenet.hardware.catalog import resolve_name
from prenet.layers import ALL_SHAPE_COLUMNS
from prenet.paths import data_dir

JUSTUS_OPTIMIZERS = {0: ("forward", "none"), 1: ("train_step", "sgd"), 5: ("train_step", "adam")}
_HASH_SEED = 20250101


def _finish(df: pl.DataFrame, source: str, op: str, max_rows_per_gpu: int | None) -> pl.DataFrame:
    for c in ALL_SHAPE_COLUMNS:
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    keys = ["hardware_id", "direction", "optimizer", "activation", *ALL_SHAPE_COLUMNS]
    df = (
        df.group_by(keys, maintain_order=True)
        .agg(pl.col("time_ms").median(), pl.col("spread_rel").median())
        .with_columns(
            pl.lit(source).alias("source"),
            pl.lit(0).cast(pl.Int64).alias("threads"),
            pl.lit("float32").alias("dtype"),
            pl.lit(op).alias("op"),
        )
    )
    names = {n: resolve_name(n) for n in df.get_column("hardware_id").unique().to_list()}
    df = df.with_columns(pl.col("hardware_id").replace_strict(names))
    df = df.filter(pl.col("time_ms") > 0)
    if max_rows_per_gpu is not None:
        h = pl.concat_list([pl.col(c).fill_null(-1) for c in ALL_SHAPE_COLUMNS]).hash(seed=_HASH_SEED)
        df = (
            df.with_columns(h.alias("_h"))
            .sort(["hardware_id", "_h", "direction", "optimizer", "activation"])
            .with_columns(pl.col("_h").rank("dense").over("hardware_id").alias("_r"))
            .filter(pl.col("_r") <= max_rows_per_gpu)
            .drop("_h", "_r")
        )
    cols = ["source", "hardware_id", "threads", "dtype", "op", "direction", "optimizer", "activation", *ALL_SHAPE_COLUMNS, "time_ms", "spread_rel"]
    return df.select(cols)


def _justus(path: Path, op: str, shape: list[pl.Expr], max_rows_per_gpu: int | None) -> pl.DataFrame:
    raw = pl.read_csv(path)
    raw = raw.filter(pl.col("optimizer").is_in(list(JUSTUS_OPTIMIZERS)))
    df = raw.select(
        pl.col("gpu_name").alias("hardware_id"),
        pl.col("optimizer").replace_strict({k: v[0] for k, v in JUSTUS_OPTIMIZERS.items()}).alias("direction"),
        pl.col("optimizer").replace_strict({k: v[1] for k, v in JUSTUS_OPTIMIZERS.items()}).alias("optimizer"),
        pl.col("activation_name").fill_null("none").str.to_lowercase().alias("activation"),
        *shape,
        pl.col("timeUsed_median").alias("time_ms"),
        (pl.col("timeUsed_std") / pl.col("timeUsed_median")).alias("spread_rel"),
    )
    return _finish(df, "justus2018", op, max_rows_per_gpu)


def load_justus_dense(max_rows_per_gpu: int | None = None, root: Path | None = None) -> pl.DataFrame:
    """Justus et al. 2018 dense layers (TensorFlow 1, FP32): forward, and forward+backward+SGD/Adam update."""
    path = (root or data_dir()) / "external" / "justus2018" / "justus_dense_6gpu.csv.gz"
    shape = [pl.col("batchsize").alias("batch"), pl.col("dim_input").alias("in_features"), pl.col("dim_output").alias("out_features")]
    return _justus(path, "linear", shape, max_rows_per_gpu)


def load_justus_conv(max_rows_per_gpu: int | None = None, root: Path | None = None) -> pl.DataFrame:
    """Justus et al. 2018 Conv2D layers. TensorFlow padding 'same' (1) gives output ⌈input/stride⌉, stored as
    ``output_size``; ``padding`` is recorded as kernel//2 pixels (exact for odd kernels)."""
    path = (root or data_dir()) / "external" / "justus2018" / "justus_conv_6gpu.csv.gz"
    same = pl.col("padding") == 1
    h, k, s = pl.col("matsize"), pl.col("kernelsize"), pl.col("strides")
    shape = [
        pl.col("batchsize").alias("batch"),
        pl.col("channels_in").alias("in_channels"),
        pl.col("channels_out").alias("out_channels"),
        k.alias("kernel_size"),
        h.alias("input_size"),
        s.alias("stride"),
        pl.when(same).then(k // 2).otherwise(0).alias("padding"),
        pl.when(same).then((h + s - 1) // s).otherwise((h - k) // s + 1).alias("output_size"),
    ]
    df = _justus(path, "conv2d", shape, max_rows_per_gpu)
    return df.filter(pl.col("output_size") >= 1)


def _neusight_forward(raw: pl.DataFrame, shape: list[pl.Expr]) -> pl.DataFrame:
    """NeuSight rows → raw-row columns: forward only, no optimizer, no activation, no published spread."""
    return raw.select(
        pl.col("Device").alias("hardware_id"),
        pl.lit("forward").alias("direction"),
        pl.lit("none").alias("optimizer"),
        pl.lit("none").alias("activation"),
        *shape,
        pl.col("latency_ms").alias("time_ms"),
        pl.lit(None, dtype=pl.Float64).alias("spread_rel"),
    )


def load_neusight_linear(max_rows_per_gpu: int | None = None, root: Path | None = None, file: str = "train_linear_5gpu.csv.gz") -> pl.DataFrame:
    """NeuSight 2025 ``nn.Linear`` forward on [B, M, N] → K, as a dense layer of batch B·M (PyTorch, strict FP32);
    ``file``: its training set, or its test set (``test_linear_3gpu.csv.gz``)."""
    raw = pl.read_csv((root or data_dir()) / "external" / "neusight2025" / file)
    shape = [(pl.col("B") * pl.col("M")).alias("batch"), pl.col("N").alias("in_features"), pl.col("K").alias("out_features")]
    return _finish(_neusight_forward(raw, shape), "neusight2025", "linear", max_rows_per_gpu)


def load_neusight_conv(max_rows_per_gpu: int | None = None, root: Path | None = None) -> pl.DataFrame:
    """NeuSight 2025 ``nn.Conv2d`` forward (no bias), square input and kernel."""
    raw = pl.read_csv((root or data_dir()) / "external" / "neusight2025" / "train_conv_5gpu.csv.gz")
    h, k, s, p = pl.col("Input_Size"), pl.col("Kernel_Size"), pl.col("Stride"), pl.col("Padding")
    shape = [
        pl.col("B").alias("batch"), pl.col("Input_Channel").alias("in_channels"), pl.col("Output_Channel").alias("out_channels"),
        k.alias("kernel_size"), h.alias("input_size"), s.alias("stride"), p.alias("padding"),
        ((h + 2 * p - k) // s + 1).alias("output_size"),
    ]
    df = _neusight_forward(raw, shape)
    return _finish(df.filter(pl.col("output_size") >= 1), "neusight2025", "conv2d", max_rows_per_gpu)


#: NeuSight op names of the [B, H] row-wise datasets → prenet ops (mul, div, pow and the ``*u`` variants have no
#: prenet layer and are not loaded).
NEUSIGHT_ROWWISE = {"ln": "layernorm", "softmax": "softmax", "add": "add", "relu": "relu", "gelu": "gelu", "tanh": "tanh"}
_ROWWISE_FILES = {"layernorm": "layernorm_5gpu.csv.gz", "softmax": "softmax_5gpu.csv.gz"}


def load_neusight_rowwise(op: str, max_rows_per_gpu: int | None = None, root: Path | None = None) -> pl.DataFrame:
    """NeuSight 2025 layer norm, softmax and element-wise ops on [B, H] (forward): batch = B, hidden = H."""
    name = _ROWWISE_FILES.get(op, "elementwise_5gpu.csv.gz")
    raw = pl.read_csv((root or data_dir()) / "external" / "neusight2025" / name)
    raw = raw.filter(pl.col("OPName").replace_strict(NEUSIGHT_ROWWISE, default=None) == op)
    df = _neusight_forward(raw, [pl.col("B").alias("batch"), pl.col("H").alias("hidden")])
    return _finish(df, "neusight2025", op, max_rows_per_gpu)


LOADERS = {
    **{("neusight2025", op): (lambda op: lambda m: load_neusight_rowwise(op, m))(op) for op in NEUSIGHT_ROWWISE.values()},
    ("justus2018", "linear"): load_justus_dense,
    ("justus2018", "conv2d"): load_justus_conv,
    ("neusight2025", "linear"): load_neusight_linear,
    ("neusight2025", "conv2d"): load_neusight_conv,
}


def load_external(sources: list[str], ops: list[str], max_rows_per_gpu: int | None) -> pl.DataFrame:
    """Concatenate the requested (source, op) datasets that exist (a source without one of ``ops`` adds none of it).
    A source that is not a vendored dataset, or ``sources`` given as one name instead of a list, is one
    :class:`PrenetError` naming the known sources (a typo would otherwise drop the data silently)."""
    known = sorted({s for s, _ in LOADERS})
    if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
        raise PrenetError(f"external sources must be a list of names, e.g. [{', '.join(known)}]; got {sources!r}")
    unknown = [s for s in sources if s not in known]
    if unknown:
        raise PrenetError(f"unknown external source(s) {', '.join(map(repr, unknown))}; the vendored ones are {', '.join(known)}")
    frames = [LOADERS[(s, o)](max_rows_per_gpu) for s in sources for o in ops if (s, o) in LOADERS]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()
