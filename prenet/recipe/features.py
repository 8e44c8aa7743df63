"""PreNeT features (Table 1) for layer timings, and the feature sets of the ablation.

For each row: layer-specific parameters (the op's shape columns, direction, optimizer), CO = FLOPs of the
iteration, CM = weight / input / output bytes and the bytes the iteration moves, CT = FLOPs / peak FLOP/s of
the hardware (ms), the roofline time max(FLOPs / peak, bytes / bandwidth) (ms), and the hardware features.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping

import numpy as np
import polars as pl

from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS, DTYPE_BYTES, direction_bytes, direction_flops, layer_type

IDENTITY_COLUMNS = ("source", "hardware_id", "threads", "dtype", "op", "direction", "optimizer", "activation")


def _hash(parts: Iterable[object]) -> str:
    return hashlib.sha256(json.dumps(list(parts), default=str).encode()).hexdigest()[:20]


def shape_id(op: str, shape: Mapping[str, int | None]) -> str:
    """Identity of a layer shape, independent of hardware, direction and source (the split's group key)."""
    return _hash([op, *[shape.get(c) for c in ALL_SHAPE_COLUMNS]])


def featurize(rows: pl.DataFrame, hardware: Mapping[str, HardwareSpec]) -> pl.DataFrame:
    """Rows with identity columns, shape columns, ``time_ms`` and ``spread_rel`` → the LayerFeatures table.

    ``hardware`` maps every ``hardware_id`` present to its spec; a missing one is an error naming it.
    """
    if "time_ms" not in rows.columns:  # prediction: no measured time
        rows = rows.with_columns(pl.lit(None, dtype=pl.Float64).alias("time_ms"))
    if "spread_rel" not in rows.columns:
        rows = rows.with_columns(pl.lit(None, dtype=pl.Float64).alias("spread_rel"))
    missing = sorted(set(rows.get_column("hardware_id").unique().to_list()) - set(hardware))
    if missing:
        raise KeyError(f"no hardware spec for {', '.join(missing)}; add it to the catalog or the benchmark's hardware record")
    out: dict[str, list] = {
        k: []
        for k in ("sample_id", "shape_id", "flops", "params", "weight_bytes", "input_bytes", "output_bytes", "bytes_moved", "ct_ms", "roofline_ms")
    }
    hw_cols: dict[str, list[float]] = {k: [] for k in next(iter(hardware.values())).features()} if hardware else {}
    for r in rows.iter_rows(named=True):
        lt = layer_type(r["op"])
        shape = {c: r[c] for c in lt.all_columns}
        db = DTYPE_BYTES[r["dtype"]]
        cost = lt.cost(shape, db)
        hw = hardware[r["hardware_id"]]
        flops = direction_flops(cost, r["direction"], r["optimizer"])
        moved = direction_bytes(cost, r["direction"], r["optimizer"], db)
        ct_s = flops / hw.peak_flops
        out["sample_id"].append(_hash([r[c] for c in IDENTITY_COLUMNS] + [r.get(c) for c in ALL_SHAPE_COLUMNS]))
        out["shape_id"].append(shape_id(r["op"], r))
        out["flops"].append(flops)
        out["params"].append(cost.params)
        out["weight_bytes"].append(float(cost.weight_bytes))
        out["input_bytes"].append(float(cost.input_bytes))
        out["output_bytes"].append(float(cost.output_bytes))
        out["bytes_moved"].append(moved)
        out["ct_ms"].append(ct_s * 1e3)
        out["roofline_ms"].append(max(ct_s, moved / hw.mem_bw_bytes_per_s) * 1e3)
        for k, v in hw.features().items():
            hw_cols[k].append(v)
    extra = pl.DataFrame({**out, **hw_cols}, schema_overrides={"params": pl.Int64})
    base = rows.select(*IDENTITY_COLUMNS, *ALL_SHAPE_COLUMNS, "time_ms", pl.col("spread_rel").cast(pl.Float64))
    return pl.concat([base, extra], how="horizontal").select(
        "sample_id",
        "shape_id",
        *IDENTITY_COLUMNS,
        *ALL_SHAPE_COLUMNS,
        "time_ms",
        "spread_rel",
        *[k for k in out if k not in ("sample_id", "shape_id")],
        *hw_cols,
    )


# ---- feature sets (PreNeT Table 4 ablation: baseline, +CO, +CM, +CT) ---------------------------------------

HW_FEATURES = ("hw_peak_tflops", "hw_mem_bw_gbps", "hw_cores", "hw_clock_mhz", "hw_is_gpu")
CO_FEATURES = ("flops",)
CM_FEATURES = ("weight_bytes", "input_bytes", "output_bytes", "bytes_moved")
CT_FEATURES = ("ct_ms", "roofline_ms")
FEATURE_SETS = ("baseline", "co", "cm", "ct")  # cumulative: ct = baseline + CO + CM + CT
_LOGGED = {*CO_FEATURES, *CM_FEATURES, *CT_FEATURES, *ALL_SHAPE_COLUMNS, "hw_peak_tflops", "hw_mem_bw_gbps", "hw_cores", "hw_clock_mhz"}


#: The op of the pooled model (one regressor over every op, for ops too rare to have their own).
POOLED = "_pooled"


def feature_columns(op: str, feature_set: str) -> list[str]:
    """Columns of the design matrix for ``op`` under a cumulative feature set.

    ``baseline``: the op's shape columns, direction and optimizer indicators, activation flag and hardware
    features (Justus et al.'s recipe: no computational features); ``co`` adds FLOPs; ``cm`` adds bytes;
    ``ct`` adds FLOPs / peak FLOP/s and the roofline time (PreNeT's full set). For :data:`POOLED` the shape
    columns are replaced by one indicator per registered op.
    """
    if feature_set not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {feature_set!r}; use one of {', '.join(FEATURE_SETS)}")
    from prenet.layers import REGISTRY

    layer = [f"op_is_{o}" for o in sorted(REGISTRY)] if op == POOLED else list(layer_type(op).all_columns)
    cols = [*layer, "is_forward_backward", "is_train_step", "is_adam", "has_activation", "threads", *HW_FEATURES]
    level = FEATURE_SETS.index(feature_set)
    for i, group in enumerate((CO_FEATURES, CM_FEATURES, CT_FEATURES), start=1):
        if level >= i:
            cols += group
    return cols


def design_matrix(df: pl.DataFrame, op: str, feature_set: str) -> tuple[np.ndarray, list[str]]:
    """The float design matrix for ``op`` rows (sizes, FLOPs, bytes and times as log1p)."""
    cols = feature_columns(op, feature_set)
    from prenet.layers import REGISTRY

    derived = df.with_columns(
        *[(pl.col("op") == o).cast(pl.Float64).alias(f"op_is_{o}") for o in sorted(REGISTRY) if op == POOLED],
        (pl.col("direction") == "forward_backward").cast(pl.Float64).alias("is_forward_backward"),
        (pl.col("direction") == "train_step").cast(pl.Float64).alias("is_train_step"),
        (pl.col("optimizer") == "adam").cast(pl.Float64).alias("is_adam"),
        (pl.col("activation") != "none").cast(pl.Float64).alias("has_activation"),
    )
    exprs = [(pl.col(c).cast(pl.Float64).log1p() if c in _LOGGED else pl.col(c).cast(pl.Float64)).alias(c) for c in cols]
    X = derived.select(exprs).to_numpy().astype(np.float64)
    if np.isnan(X).any():
        bad = [c for c, j in zip(cols, np.isnan(X).any(axis=0)) if j]
        raise ValueError(f"op {op}: feature columns {bad} have nulls; is the table's op column right?")
    return X, cols


def log_target(time_ms: np.ndarray) -> np.ndarray:
    """Regression target: ln(time in ms) — errors become relative, as MAPE measures them."""
    return np.log(np.asarray(time_ms, dtype=np.float64))


def from_log_target(y: np.ndarray) -> np.ndarray:
    return np.exp(np.asarray(y, dtype=np.float64))
