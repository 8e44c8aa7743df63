"""The data-parallel residual: what measured multi-GPU steps lose beyond their collectives, fitted and scored."""

from __future__ import annotations

import numpy as np
import polars as pl

from prenet.parallel.model import SyncResidual, precision_class, sync_growth


def fit_residual(rows: pl.DataFrame) -> SyncResidual:
    """The residual share at 8 GPUs per precision class: the median over ``rows`` of (measured − physics ratio) /
    :func:`~prenet.parallel.data_parallel.sync_growth`, bounded to [0, 1]."""
    r = rows.with_columns(
        pl.col("precision").map_elements(precision_class, return_dtype=pl.Utf8).alias("cls"),
        ((pl.col("measured_ratio") - pl.col("physics_ratio")) / pl.col("gpus").map_elements(sync_growth, return_dtype=pl.Float64)).alias("share"),
    )
    shares = {str(c): float(np.clip(s, 0.0, 1.0)) for c, s in r.group_by("cls").agg(pl.col("share").median()).sort("cls").iter_rows()}
    return SyncResidual(shares, rows=rows.height)


def with_residual(rows: pl.DataFrame, residual: SyncResidual) -> pl.DataFrame:
    """``rows`` with ``predicted_ratio`` = physics ratio + the residual's share at their GPU count."""
    add = [residual.share_at_8.get(precision_class(p), 0.0) * sync_growth(int(g)) for p, g in rows.select("precision", "gpus").iter_rows()]
    return rows.with_columns((pl.col("physics_ratio") + pl.Series(add, dtype=pl.Float64)).alias("predicted_ratio"))


def leave_one_model_out(rows: pl.DataFrame) -> pl.DataFrame:
    """Each model's rows with ``predicted_ratio`` from a residual fitted on the other models' rows only."""
    parts = []
    for (name,), part in rows.group_by(["model"], maintain_order=True):
        parts.append(with_residual(part, fit_residual(rows.filter(pl.col("model") != name))))
    return pl.concat(parts)
