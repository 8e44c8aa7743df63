"""Scores of the multi-GPU model: collectives against measured ones, scaling ratios against DeepLearningExamples."""

from __future__ import annotations

from typing import Any

import polars as pl

from prenet.parallel.collectives import CollectiveModel, fit, predict_rows


def _ape(pred: str, true: str) -> pl.Expr:
    return (100.0 * (pl.col(pred) - pl.col(true)).abs() / pl.col(true)).alias("ape_pct")


def collectives_summary(model: CollectiveModel, rows: pl.DataFrame, min_bytes: float) -> tuple[dict[str, Any], pl.DataFrame]:
    """MAPE (%) of ``model`` on ``rows`` (measured collectives): overall, on messages ≥ ``min_bytes``, per link and per
    system and op; and the per-row table."""
    p = predict_rows(model, rows).with_columns(_ape("predicted_us", "measured_us"))
    big = p.filter(pl.col("size_bytes") >= min_bytes)
    per = (
        p.group_by("link", "system", "op")
        .agg(
            pl.len().alias("n"),
            pl.col("ape_pct").mean().alias("mape_pct"),
            pl.col("ape_pct").filter(pl.col("size_bytes") >= min_bytes).mean().alias("mape_pct_1mib"),
        )
        .sort("link", "system", "op")
    )
    summary = {
        "n": p.height,
        "mape_pct": float(p["ape_pct"].mean()),
        "median_ape_pct": float(p["ape_pct"].median()),
        "mape_pct_1mib": float(big["ape_pct"].mean()) if big.height else None,
        "n_1mib": big.height,
        "by_link": {
            str(link): {
                "n": part.height,
                "mape_pct": float(part["ape_pct"].mean()),
                "mape_pct_1mib": float(part.filter(pl.col("size_bytes") >= min_bytes)["ape_pct"].mean()),
            }
            for (link,), part in p.group_by(["link"], maintain_order=True)
        },
        "by_system_op": per.to_dicts(),
    }
    return summary, p.drop("key")


def leave_one_system_out(rows: pl.DataFrame, min_bytes: float) -> dict[str, dict[str, float]]:
    """Each system's measured collectives predicted by a model fitted on the other systems' rows: MAPE (%), all and
    ≥ ``min_bytes``."""
    out = {}
    for (system,), part in rows.group_by(["system"], maintain_order=True):
        m = fit(rows.filter(pl.col("system") != system), source=f"without {system}")
        p = predict_rows(m, part).with_columns(_ape("predicted_us", "measured_us"))
        out[str(system)] = {
            "mape_pct": float(p["ape_pct"].mean()),
            "mape_pct_1mib": float(p.filter(pl.col("size_bytes") >= min_bytes)["ape_pct"].mean()),
        }
    return out


def scaling_summary(rows: pl.DataFrame) -> dict[str, Any]:
    """MAPE (%) of ``predicted_ratio`` and of ``physics_ratio`` against ``measured_ratio``, overall and per precision."""
    p = rows.with_columns(
        _ape("predicted_ratio", "measured_ratio"),
        _ape("physics_ratio", "measured_ratio").alias("phys"),
    )
    return {
        "n": p.height,
        "mape_pct": float(p["ape_pct"].mean()),
        "physics_mape_pct": float(p["phys"].mean()),
        "max_ape_pct": float(p["ape_pct"].max()),
        "by_precision": {str(k): float(v) for k, v in p.group_by("precision").agg(pl.col("ape_pct").mean()).sort("precision").iter_rows()},
    }


#: ZeRO (Rajbhandari et al., SC 2020), Table 1: model-state memory per device (GB) of a Ψ = 7.5 B model with Adam in
#: mixed precision (K = 12) under P_os+g+p (ZeRO-3), by data-parallel degree N_d.
ZERO_TABLE1 = {"params": 7.5e9, "gb_by_gpus": {1: 120.0, 4: 30.0, 16: 7.5, 64: 1.88, 256: 0.47, 1024: 0.12}}


def zero3_memory_check() -> dict[str, Any]:
    """prenet's FSDP model-state accounting (:func:`~prenet.parallel.memory.fsdp_memory_bytes` without
    activations or gathered units: FP32 weights 4 + FP32 gradients 4 + Adam 8 bytes per parameter under autocast, ÷ N)
    against ZeRO's Table 1 ((2 + 2 + 12) Ψ / N_d): the largest difference (%)."""
    from prenet.parallel.memory import fsdp_memory_bytes

    psi = ZERO_TABLE1["params"]
    w, g, o = 4 * psi, 4 * psi, 8 * psi
    rows = {n: fsdp_memory_bytes(int(w + g + o), int(w), int(g), int(o), n, units=10**9) / 1e9 for n in ZERO_TABLE1["gb_by_gpus"]}
    diffs = {n: 100.0 * abs(rows[n] - gb) / gb for n, gb in ZERO_TABLE1["gb_by_gpus"].items()}
    return {"gb_by_gpus": {str(n): round(v, 3) for n, v in rows.items()}, "max_diff_pct": max(diffs.values())}
