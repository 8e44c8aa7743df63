"""The memory prediction, measured: each zoo step's predicted peak (:func:`~prenet.memory.training.predict_training_memory`,
traced on the meta device) against the peak the ``benchmark_models`` stage measured in one real step (bytes)."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch

from prenet import zoo
from prenet.memory.training import predict_training_memory


def zoo_memory(timings: pl.DataFrame, sizes: dict | None = None) -> pl.DataFrame:
    """One row per zoo step of ``timings`` (``ModelTimings``) with a measured peak: model, batch_size, optimizer,
    measured_memory_bytes, predicted_memory_bytes; ``sizes``: the zoo builders' size overrides."""
    rows = []
    for r in timings.filter(pl.col("peak_memory_bytes").is_not_null()).iter_rows(named=True):
        with torch.device("meta"):
            module, batch = zoo.build(r["model"], int(r["batch_size"]), sizes)
        rows.append(
            {
                "model": r["model"],
                "batch_size": int(r["batch_size"]),
                "optimizer": r["optimizer"],
                "measured_memory_bytes": int(r["peak_memory_bytes"]),
                "predicted_memory_bytes": int(predict_training_memory(module, batch, r["optimizer"]).total_bytes),
            }
        )
    schema = {
        "model": pl.String,
        "batch_size": pl.Int64,
        "optimizer": pl.String,
        "measured_memory_bytes": pl.Int64,
        "predicted_memory_bytes": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


def memory_summary(df: pl.DataFrame) -> dict:
    """MAPE and median APE (%) of the predicted peaks, the share within ±20 %, n, the range of measured / predicted
    (the largest ratio is the planner's 'tight' margin) and the MAPE per zoo model; {} without measurements."""
    if df.height == 0:
        return {}
    m = df["measured_memory_bytes"].to_numpy().astype(float)
    p = df["predicted_memory_bytes"].to_numpy().astype(float)
    ape = np.abs(p - m) / m
    ratio = m / p
    by_model = {name: float(100 * (np.abs(g["predicted_memory_bytes"] - g["measured_memory_bytes"]) / g["measured_memory_bytes"]).mean())
                for (name,), g in df.group_by(["model"], maintain_order=True)}  # fmt: skip
    return {
        "n": int(df.height),
        "mape_pct": float(100 * ape.mean()),
        "median_ape_pct": float(100 * np.median(ape)),
        "within_20pct": float(np.mean(ape <= 0.2)),
        "ratio_min": float(ratio.min()),
        "ratio_median": float(np.median(ratio)),
        "ratio_max": float(ratio.max()),
        "by_model": dict(sorted(by_model.items())),
    }
