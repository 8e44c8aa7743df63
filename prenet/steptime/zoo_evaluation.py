"""The op-level model on whole zoo training steps: each measured step predicted through the one step-time path, the
errors with bootstrap intervals, the share of predicted time from fallbacks, and the trace time of a large model."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl
import torch

from prenet import zoo
from prenet.hardware.spec import HardwareSpec
from prenet.ops import trace_step
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.op_evaluation import ape
from prenet.steptime.step import cpu_conv_sequence_share, cpu_module_call_ms, default_overhead_ms, device_type, is_fallback, predict_trace


def whole_model_predictions(
    model: EfficiencyModel,
    timings: pl.DataFrame,
    precision: str,
    hw: HardwareSpec,
    *,
    sizes: dict | None,
    overhead_path: str | Path,
    threads: int = 1,
) -> pl.DataFrame:
    """Each measured zoo step of ``timings`` (``ModelTimings``) predicted through the one step-time path (trace on meta →
    ops → sum + its module calls × the host cost and the null step of ``overhead_path``); ``sizes``: the zoo builders' size overrides; ``threads``: the CPU
    threads the steps were timed on. ``timed_ms``: the step as timed, where ``timings`` carries it beside a rescaled
    ``measured_ms`` (:func:`~prenet.measurement.probe.at_reference_speed`), else ``measured_ms``."""
    rows = []
    call_ms = cpu_module_call_ms(hw, overhead_path)  # one record for every row (the null step differs by optimizer)
    share = cpu_conv_sequence_share(hw, precision, overhead_path)  # one precision for every row
    for r in timings.iter_rows(named=True):
        with torch.device("meta"):
            module, batch = zoo.build(r["model"], int(r["batch_size"]), sizes)
        trace = trace_step(module, batch, optimizer=r["optimizer"], precision=precision, device_type="cpu", threads=threads)
        pred, ops = predict_trace(
            trace,
            hw,
            model,
            overhead_ms=default_overhead_ms(hw, r["optimizer"], overhead_path),
            module_call_ms=call_ms,
            conv_sequence_share=share,
        )
        fallback = float(ops.filter(is_fallback())["predicted_ms"].sum()) / max(float(ops["predicted_ms"].sum()), 1e-12)
        rows.append(
            {
                "model": r["model"],
                "batch_size": r["batch_size"],
                "precision": precision,
                "measured_ms": r["measured_ms"],
                "timed_ms": r.get("timed_ms", r["measured_ms"]),
                "predicted_ms": pred.step_seconds * 1e3,
                "roofline_ms": float(ops["roofline_ms"].sum()) + pred.overhead_ms,
                "spread_rel": r["spread_rel"],
                "fallback_share": fallback,
                "ops": ops.height,
            }
        )
    return pl.DataFrame(rows)


def mean_ci(values: np.ndarray, *, seed: int = 0, n_boot: int = 2000) -> list[float]:
    """95 % bootstrap interval of the mean of ``values`` (resampling the items: zoo steps, held-out GPUs)."""
    v = np.asarray(values, float)
    if v.size < 2:
        return [float(v.mean()), float(v.mean())] if v.size else []
    idx = np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))
    m = v[idx].mean(axis=1)
    return [round(float(np.quantile(m, 0.025)), 2), round(float(np.quantile(m, 0.975)), 2)]


def whole_model_summary(w: pl.DataFrame) -> dict:
    """MAPE (with its 95 % bootstrap interval), median APE, n, the roofline's MAPE and the noise floor of whole steps (%);
    where ``w``'s ``timed_ms`` (:func:`whole_model_predictions`) differ from its ``measured_ms``, also the MAPE against
    the steps as timed, before their rescaling to the op benchmark's host speed: how much of the figure that is."""
    if w.height == 0:
        return {}
    e = ape(w["predicted_ms"].to_numpy(), w["measured_ms"].to_numpy())
    rescaled = "timed_ms" in w.columns and not np.allclose(w["timed_ms"].to_numpy(), w["measured_ms"].to_numpy())
    extra = {"as_timed_mape_pct": float(ape(w["predicted_ms"].to_numpy(), w["timed_ms"].to_numpy()).mean())} if rescaled else {}
    return extra | {
        "mape_pct": float(e.mean()),
        "mape_ci95": mean_ci(e),
        "median_ape_pct": float(np.median(e)),
        "n": w.height,
        "roofline_mape_pct": float(ape(w["roofline_ms"].to_numpy(), w["measured_ms"].to_numpy()).mean()),
        "noise_floor_pct": float(100 * w["spread_rel"].median()),
        "per_model": {f"{m} b{b}": round(float(x), 1) for m, b, x in zip(w["model"], w["batch_size"], e)},
    }


def fallback_table(model: EfficiencyModel, cpu: HardwareSpec, gpu: HardwareSpec, names: list[str], sizes: dict | None) -> list[dict]:
    """Share of each zoo model's (``names``) predicted step (batch 16) estimated without a model of the op's own family,
    on ``cpu`` (fp32) and ``gpu`` (fp32 and bf16)."""
    out = []
    for name in names:
        with torch.device("meta"):
            module, batch = zoo.build(name, 16, sizes)
        for hw, prec in ((cpu, "fp32"), (gpu, "fp32"), (gpu, "bf16")):
            pred, ops = predict_trace(trace_step(module, batch, precision=prec, device_type=device_type(hw)), hw, model)
            out.append(
                {
                    "model": name,
                    "hardware": hw.hardware_id,
                    "precision": prec,
                    "step_ms": round(pred.step_seconds * 1e3, 3),
                    **{f"{k}_share": round(v, 3) for k, v in pred.estimate_share.items()},
                }
            )
    return out


def trace_seconds() -> dict:
    """Wall time (s) of tracing one training step of a 1.3 B-parameter GPT (GPT-3 XL sizes, batch 8 × 2048 tokens, Adam,
    bf16 for a GPU) on the meta device: no weight memory, no compute."""
    t0 = time.perf_counter()
    with torch.device("meta"):
        module, batch = zoo.gpt_sdpa(batch_size=8, vocab=50257, d=2048, layers=24, heads=16, seq_len=2048)
    trace = trace_step(module, batch, optimizer="adam", precision="bf16", device_type="cuda")
    return {"gpt_1p3b_s": round(time.perf_counter() - t0, 2), "params": trace.params, "ops": len(trace.records)}
