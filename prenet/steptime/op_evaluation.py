"""Evaluation of the op-level model: per-op errors, leave-one-GPU-out, whole models."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from prenet.data.external_ops import load_unseen_gpu_ops
from prenet.hardware.catalog import get
from prenet.hardware.spec import HardwareSpec
from prenet.steptime.efficiency import EfficiencyModel


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Absolute percentage errors (%)."""
    return 100.0 * np.abs(np.asarray(pred) - np.asarray(true)) / np.asarray(true)


def by_device(frame: pl.DataFrame, specs: dict[str, HardwareSpec]) -> list[tuple[pl.DataFrame, HardwareSpec]]:
    """``frame`` split per ``hardware_id``, each with its spec."""
    return [(frame.filter(pl.col("hardware_id") == h), specs[h]) for h in frame.get_column("hardware_id").unique().sort().to_list()]


def predict_rows(model: EfficiencyModel, frame: pl.DataFrame, specs: dict[str, HardwareSpec]) -> pl.DataFrame:
    """Predictions for rows of many devices (columns of :meth:`EfficiencyModel.predict`), in device order."""
    return pl.concat([model.predict(f, hw) for f, hw in by_device(frame, specs)], how="vertical_relaxed")


def leave_one_gpu_out(gpu_ops: pl.DataFrame, *, params: dict[str, Any], threads: int = 1, workers: int = 1) -> pl.DataFrame:
    """For every GPU: train on the other GPUs' ops, predict this GPU's from its spec sheet. One row per (GPU, family,
    arithmetic unit: fp32 | tf32 | fp16 | bf16):
    ``mape`` (model), ``roofline_mape`` (pure roofline, efficiency 1), ``median_ape``, ``rows``, ``ratio_deciles`` (deciles of
    measured / predicted: the planner's GPU interval). The folds are independent: ``workers`` > 1 fits them in that many
    spawned processes of ``threads`` threads each (no timing is taken), rows in the same order."""
    held_out = sorted(gpu_ops.get_column("hardware_id").unique().to_list())
    jobs = [(gpu_ops, held, params, threads) for held in held_out]
    out: list[dict[str, Any]] = []
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: fork can deadlock once OpenMP (xgboost, torch) has run in this process
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
            for rows in ex.map(_gpu_fold, jobs):
                out += rows
    else:
        for job in jobs:
            out += _gpu_fold(job)
    return pl.DataFrame(out)


def _gpu_fold(job: tuple[pl.DataFrame, str, dict[str, Any], int]) -> list[dict[str, Any]]:
    """One fold of :func:`leave_one_gpu_out`: its rows for the held-out GPU ``held``."""
    gpu_ops, held, params, threads = job
    specs = {h: get(h) for h in gpu_ops.get_column("hardware_id").unique().to_list()}
    train = gpu_ops.filter(pl.col("hardware_id") != held)
    test = gpu_ops.filter(pl.col("hardware_id") == held)
    model = EfficiencyModel.fit(by_device(train, specs), params=params, threads=threads)
    pred = model.predict(test, specs[held])
    out = []
    for fam, unit in pred.select("family", "unit").unique().sort(["family", "unit"]).iter_rows():
        p = pred.filter((pl.col("family") == fam) & (pl.col("unit") == unit))
        t = p.get_column("measured_ms").to_numpy()
        e = ape(p.get_column("predicted_ms").to_numpy(), t)
        ratio = t / p.get_column("predicted_ms").to_numpy()
        out.append(
            {
                "hardware_id": held,
                "family": fam,
                "unit": unit,
                "rows": p.height,
                "mape": float(e.mean()),
                "median_ape": float(np.median(e)),
                "roofline_mape": float(ape(p.get_column("roofline_ms").to_numpy(), t).mean()),
                "ratio_deciles": [round(float(v), 4) for v in np.quantile(ratio, np.linspace(0.1, 0.9, 9))],
            }
        )
    return out


def errors_by(df: pl.DataFrame, by: list[str]) -> list[dict]:
    """Per group of ``by``: rows, MAPE, median APE, the roofline's MAPE and the noise floor (%) of op predictions."""
    e = df.with_columns(
        pl.Series("ape", ape(df["predicted_ms"].to_numpy(), df["measured_ms"].to_numpy())),
        pl.Series("roof_ape", ape(df["roofline_ms"].to_numpy(), df["measured_ms"].to_numpy())),
    )
    out = e.group_by(by).agg(
        pl.len().alias("rows"),
        pl.col("ape").mean().alias("mape_pct"),
        pl.col("ape").median().alias("median_ape_pct"),
        pl.col("roof_ape").mean().alias("roofline_mape_pct"),
        (pl.col("spread_rel").median() * 100).alias("noise_floor_pct"),
    )
    return out.sort(by).to_dicts()


def neusight_unseen_ops(model: EfficiencyModel, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every op of NeuSight's test set on the GPUs whose FP32 GEMM and row-wise ops the op model was not fitted on
    (``rows``: default :func:`~prenet.data.external_ops.load_unseen_gpu_ops`; L4, H100 SXM5 (its BF16/TF32 matmul
    kernels are fitted), A100 80GB PCIe (its convolutions are)), predicted from the spec sheet: one row per (GPU, shape) with ``measured_ms``,
    ``predicted_ms`` and ``roofline_ms``. FP32 forward, as NeuSight timed them (TF32 off)."""
    rows = load_unseen_gpu_ops() if rows is None else rows
    pred = predict_rows(model, rows, {h: get(h) for h in rows.get_column("hardware_id").unique().to_list()})
    return pred.select("hardware_id", "family", "op", "unit", "config_id", "flops", "measured_ms", "predicted_ms", "roofline_ms", "estimate")


def unseen_ops_summary(df: pl.DataFrame) -> dict:
    """Per GPU (each over its own op mix: the H100 has linear and bmm rows only), and per GPU and family (GEMMs split
    into ``addmm``, the linear layers, and ``bmm``): rows, MAPE (%), the roofline's MAPE, and the median of measured ÷
    predicted (> 1: the prediction is too fast), with the best measured and predicted TFLOP/s there."""

    def stats(g: pl.DataFrame) -> dict:
        t, p = g["measured_ms"].to_numpy(), g["predicted_ms"].to_numpy()
        flops = g["flops"].to_numpy()
        return {
            "rows": g.height,
            "mape_pct": round(float(ape(p, t).mean()), 1),
            "roofline_mape_pct": round(float(ape(g["roofline_ms"].to_numpy(), t).mean()), 1),
            "median_measured_over_predicted": round(float(np.median(t / p)), 3),
            "max_measured_tflops": round(float((flops / t).max() / 1e9), 2),
            "max_predicted_tflops": round(float((flops / p).max() / 1e9), 2),
        }

    per_gpu = {str(h): stats(g) for (h,), g in df.group_by("hardware_id", maintain_order=True)}
    kinds = df.with_columns(pl.when(pl.col("family") == "gemm").then(pl.col("op")).otherwise(pl.col("family")).alias("_kind"))  # addmm ≠ bmm
    per_family = {f"{h}/{k}": stats(g) for (h, k), g in kinds.sort("hardware_id", "_kind").group_by("hardware_id", "_kind", maintain_order=True)}
    return {"gpus": sorted(per_gpu), "per_gpu": per_gpu, "per_gpu_family": per_family}  # no mean: the GPUs' op mixes differ
