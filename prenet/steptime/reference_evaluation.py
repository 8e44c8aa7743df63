"""Whole-model training steps against published measured throughput: DeepLearningExamples' ResNeXt101-32x4d and
SE-ResNeXt101-32x4d on one GPU, in AMP (FP16 autocast), TF32 and FP32 (``data/external/dle2024``).

The published figure is images/s over the whole training loop (data loading included) on one GPU of a DGX; the
measured step is ``batch / throughput`` (ms). The models are built on ``meta`` at 224² as the READMEs describe
(:mod:`prenet.reference_models`) and predicted through the one step-time path, with SGD (momentum) as trained there.
No op model has seen these models, these GPUs' whole steps or any DeepLearningExamples timing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from prenet.hardware.catalog import get
from prenet.meta_device import build_on_meta
from prenet.ops import trace_step
from prenet.paths import data_dir
from prenet.reference_models import REFERENCE_MODELS
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.step import predict_trace_many

#: DeepLearningExamples' GPU and precision names → catalog GPUs (DGX-1 V100s are SXM2) and prenet precisions
DLE_GPUS = {"A100 80GB": "A100 80GB SXM4", "A100 40GB": "A100 40GB SXM4", "V100 16GB": "V100 SXM2", "V100 32GB": "V100 SXM2"}
DLE_PRECISIONS = {"amp_fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}


def load_dle_rows(root: Path | None = None) -> pl.DataFrame:
    """Single-GPU rows of the vendored models: model, DLE GPU name, catalog GPU, precision, batch, measured ms/step."""
    raw = pl.read_csv((root or data_dir()) / "external" / "dle2024" / "dle_convnets_throughput.csv", infer_schema_length=0)
    return (
        raw.filter((pl.col("num_gpus") == "1") & pl.col("model").is_in(list(REFERENCE_MODELS)) & pl.col("gpu_name").is_in(list(DLE_GPUS)))
        .select(
            "model",
            pl.col("gpu_name").alias("dle_gpu"),
            pl.col("gpu_name").replace_strict(DLE_GPUS).alias("hardware_id"),
            pl.col("precision").replace_strict(DLE_PRECISIONS).alias("precision"),
            pl.col("batch_size_per_gpu").cast(pl.Int64).alias("batch"),
            (pl.col("batch_size_per_gpu").cast(pl.Float64) / pl.col("throughput_per_gpu").cast(pl.Float64) * 1e3).alias("measured_ms"),
        )
        .sort("model", "precision", "dle_gpu")
    )


def dle_whole_model(model: EfficiencyModel, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """``rows`` (default :func:`load_dle_rows`) plus ``predicted_ms``, ``ape_pct`` and each step's share of GEMM/conv
    time; one trace per (model, precision, batch), one batched prediction over its GPUs."""
    rows = load_dle_rows() if rows is None else rows
    out = []
    for (name, precision, batch), group in rows.group_by(["model", "precision", "batch"], maintain_order=True):
        module, example = build_on_meta(REFERENCE_MODELS[name], batch_size=int(batch))
        trace = trace_step(module, example, optimizer="sgd", precision=str(precision), device_type="cuda")
        hws = [get(h) for h in group.get_column("hardware_id").to_list()]
        for row, (pred, _) in zip(group.iter_rows(named=True), predict_trace_many(trace, hws, model)):
            share = pred.family_share
            out.append({**row, "predicted_ms": pred.step_seconds * 1e3, "compute_share": share.get("conv", 0.0) + share.get("gemm", 0.0)})
    df = pl.DataFrame(out)
    return df.with_columns((100.0 * (pl.col("predicted_ms") - pl.col("measured_ms")).abs() / pl.col("measured_ms")).alias("ape_pct"))


def dle_summary(df: pl.DataFrame) -> dict:
    """MAPE per precision and overall, with the signed median error (+: predicted too slow)."""
    signed = 100.0 * (df["predicted_ms"].to_numpy() / df["measured_ms"].to_numpy() - 1.0)
    per = {p: {"n": g.height, "mape_pct": float(g["ape_pct"].mean())} for (p,), g in df.group_by(["precision"], maintain_order=True)}
    return {"n": df.height, "mape_pct": float(df["ape_pct"].mean()), "median_signed_pct": float(np.median(signed)), "per_precision": per}
