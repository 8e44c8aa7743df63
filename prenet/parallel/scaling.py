"""Multi-GPU scaling measured against predicted: DeepLearningExamples' 1 → N GPU training throughput.

For each model, GPU, precision and per-GPU batch that DeepLearningExamples measured on 1 and on N GPUs of one DGX,
the measured scaling is T_N / T_1 = N · throughput_1 / throughput_N (the same per-GPU batch, so per-step times). The
prediction traces the one-GPU step, predicts it on the GPU's spec sheet (:mod:`prenet.steptime.step`), adds the
data-parallel step's exposed collectives (:func:`prenet.parallel.data_parallel.ddp_step`) and the learned residual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl

from prenet.parallel.data_parallel import Layout, OneGpuStep, ddp_step
from prenet.parallel.model import ParallelModel
from prenet.steptime.efficiency import EfficiencyModel

#: The vendored DeepLearningExamples tables with multi-GPU rows (``data/external/dle2024``)
DLE_FILES = ("dle_convnets_throughput.csv", "dle_transformer_throughput.csv")


def dle_scaling_pairs(base: Path) -> pl.DataFrame:
    """(``model``, ``gpu_name``, ``hardware_id``, ``precision``, ``batch``, ``gpus``, ``measured_ratio``) for every
    1-GPU row of ``data/external/dle2024`` with an N-GPU row of the same model, GPU, precision and per-GPU batch."""
    from prenet.steptime.reference_evaluation import DLE_GPUS, DLE_PRECISIONS

    folder = base / "external" / "dle2024"
    raw = pl.concat([pl.read_csv(folder / f, infer_schema_length=0) for f in DLE_FILES], how="diagonal")
    d = raw.filter(pl.col("gpu_name").is_in(list(DLE_GPUS)) & pl.col("precision").is_in(list(DLE_PRECISIONS))).select(
        "model",
        "gpu_name",
        pl.col("precision").replace_strict(DLE_PRECISIONS).alias("precision"),
        pl.col("batch_size_per_gpu").cast(pl.Int64).alias("batch"),
        pl.col("num_gpus").cast(pl.Int64).alias("gpus"),
        pl.col("throughput").cast(pl.Float64).alias("throughput"),
    )
    keys = ["model", "gpu_name", "precision", "batch"]
    one = d.filter(pl.col("gpus") == 1).select(*keys, pl.col("throughput").alias("throughput_1"))
    many = d.filter(pl.col("gpus") > 1)
    return (
        many.join(one, on=keys, how="inner")
        .with_columns(
            pl.col("gpu_name").replace_strict(DLE_GPUS).alias("hardware_id"),
            (pl.col("gpus") * pl.col("throughput_1") / pl.col("throughput")).alias("measured_ratio"),
        )
        .select(*keys, "hardware_id", "gpus", "measured_ratio")
        .sort(keys + ["gpus"])
    )


def predict_scaling(
    pairs: pl.DataFrame, op_model: EfficiencyModel, model: ParallelModel, *, mapper: Callable[[Callable, list], Iterable] = map
) -> pl.DataFrame:
    """``pairs`` (those whose GPUs one node of the catalog GPU holds) with the predicted one-GPU step ``t1_ms``, the DDP step's ``comm_ms`` and ``exposed_ms`` on the
    GPU's own interconnect, and ``physics_ratio`` = (T_1 + exposed) / T_1 (no residual). Traced as
    DeepLearningExamples runs them (:func:`~prenet.steptime.reference_evaluation.trace_dle_step`), one trace per
    (model, precision, batch); ``mapper(fn, keys)`` runs the traces (the builtin ``map``, or a process pool's)."""
    from prenet.hardware.catalog import get
    from prenet.parallel.interconnect import interconnect
    from prenet.steptime.step import predict_trace

    groups = list(pairs.group_by(["model", "precision", "batch"], maintain_order=True))
    keys = [(str(name), str(precision), int(batch)) for (name, precision, batch), _ in groups]
    out = []
    for (_, group), (_, precision, _), trace in zip(groups, keys, mapper(trace_dle_key, keys)):
        for row in group.iter_rows(named=True):
            hw = get(row["hardware_id"])
            if int(row["gpus"]) > interconnect(hw).gpus_per_node:  # e.g. DGX-2's 16 V100 SXM3: not a catalog node
                continue
            pred, ops = predict_trace(trace, hw, op_model)
            t1 = pred.step_seconds * 1e3
            one = OneGpuStep(ops, trace.grad_params, trace.params, t1, precision, op_model.host_ms.get("gpu", 0.0))
            step = ddp_step(one, Layout(gpus=int(row["gpus"])), interconnect(hw), model)
            out.append({**row, "t1_ms": t1, "comm_ms": step.comm_ms, "exposed_ms": step.exposed_ms, "physics_ratio": (t1 + step.exposed_ms) / t1})
    return pl.DataFrame(out)


def trace_dle_key(key: tuple[str, str, int]):
    """:func:`~prenet.steptime.reference_evaluation.trace_dle_step` of (model, precision, batch) (picklable, for a
    process pool's ``map``)."""
    from prenet.steptime.reference_evaluation import trace_dle_step

    return trace_dle_step(*key)
