"""Stage ``benchmark_models``: time whole-model training steps of the zoo on the local CPU (ground truth for
whole-model prediction)."""

from __future__ import annotations

import time

import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from prenet import zoo
from prenet.data.io import write_json
from prenet.hardware.local import bf16_units, cpu_flags, local_id
from prenet.measurement.allocator import host_allocator
from prenet.measurement.models import (
    conv_sequence_share,
    measure_model,
    model_timing_row,
    model_timing_schema,
    module_call_ms,
    null_step_ms,
    to_device,
)
from prenet.measurement.probe import SpeedProbe
from prenet.measurement.timer import RoundSchedule, across_rounds, fastest_round
from prenet.memory.training import measure_training_memory


def measure_zoo(
    cfg: DictConfig,
    todo: list[tuple[str, int, str]],
    hw_id: str,
    probe: SpeedProbe,
    *,
    precision: str = "fp32",
    device: str | None = None,
    budget_s: float | None = None,
) -> tuple[list[dict], RoundSchedule]:
    """One model-timing row per (zoo model, batch size, optimizer) of ``todo``, each step timed (``cfg.models``: warm-up,
    blocks, repeats) in ``cfg.models.rounds`` interleaved rounds, its fastest round kept; rounds beyond
    ``cfg.models.min_rounds`` only while they end within ``budget_s`` seconds (:class:`RoundSchedule`); in ``precision``
    (fp32 | bf16 autocast), on ``device`` (default ``cfg.hardware.device``). FP32 steps also get their peak training
    memory, measured on the first round's warm-up step. Returns the rows and the rounds' schedule (what ran)."""
    device = str(cfg.hardware.device) if device is None else device
    m = cfg.models
    schedule = RoundSchedule.from_config(len(todo), m, budget_s)
    timings: dict[tuple, list] = {k: [] for k in todo}
    probes: dict[tuple, list[float]] = {k: [] for k in todo}
    peaks: dict[tuple, int | None] = {k: None for k in todo}
    params: dict[tuple, int] = {}
    # interleaved rounds (every step once per round, in turn): a minute of a noisy neighbour slows one round of every
    # step, not one step's whole measurement (prenet.measurement.timer.across_rounds)
    for r, i in tqdm(schedule, desc=f"benchmark models ({precision})", unit="step", disable=not cfg.progress):
        key = name, b, o = todo[i]
        probes[key].append(probe.sample())
        torch.manual_seed(int(cfg.seed))
        module, batch = to_device(*zoo.build(name, int(b), m.get("sizes")), device)
        warmed_ms = None
        if r == 0:
            params[key] = sum(p.numel() for p in module.parameters())
            if precision == "fp32":  # the first step is the warm-up and is measured for peak memory (profiler on the CPU, allocator stats on CUDA)
                t_mem = time.perf_counter()
                peaks[key] = measure_training_memory(module, batch, o, warmup=False)
                warmed_ms = (time.perf_counter() - t_mem) * 1e3 if int(m.warmup) <= 1 else None
        timings[key].append(
            measure_model(
                module,
                batch,
                optimizer=o,
                warmup=int(m.warmup),
                repeats=int(m.repeats),
                min_block_ms=float(m.min_block_ms),
                warmed_ms=warmed_ms,
                warmup_ms=float(m.warmup_ms),
                precision=precision,
            )
        )
        del module, batch
    rows = [
        model_timing_row(
            name,
            int(b),
            o,
            hw_id,
            int(cfg.threads),
            params[(name, b, o)],
            across_rounds(timings[(name, b, o)]),
            peak_memory_bytes=peaks[(name, b, o)],
            probe_ms=float(fastest_round(np.asarray(probes[(name, b, o)]))),  # the host speed the fastest rounds ran at (across_rounds)
        )
        for name, b, o in todo
    ]
    return rows, schedule


def benchmark_models(cfg: DictConfig) -> dict:
    """Measure every (zoo model, batch size, optimizer) of ``cfg.models`` on this machine — step time (ms) and peak
    training memory (bytes) — and the per-step overhead (a null step) and, on a CPU, the host's cost per module
    call (:func:`~prenet.measurement.models.module_call_ms`); write ``paths.model_timings``, ``paths.step_overhead`` and
    ``metrics/benchmark_models.json``."""
    m = cfg.models
    torch.set_num_threads(int(cfg.threads))
    allocator = host_allocator(bool(cfg.keep_freed_memory))
    hw_id = local_id(str(cfg.hardware.device))  # a label only: no GEMM peaks to measure here
    todo = [(name, b, o) for name in m.names for b in m.batch_sizes for o in m.optimizers]
    t0 = time.monotonic()
    # host speed beside every row: evaluate_ops puts these steps on the op benchmark's scale. Sampled before every step
    # (~20 ms each): at every 5 s the zoo's 10 rows carried 3-4 distinct samples, too few to compare (probe.speed_ratio)
    probe = SpeedProbe(int(cfg.threads), every_s=0.0)
    rows, schedule = measure_zoo(cfg, todo, hw_id, probe, budget_s=m.get("rounds_budget_s"))
    df = pl.DataFrame(rows, schema=model_timing_schema(), orient="row")
    write_artifact(df, cfg, "model_timings")
    overhead = {o: null_step_ms(o, device=str(cfg.hardware.device)) for o in m.optimizers}
    cpu = str(cfg.hardware.device) == "cpu"
    issue = module_call_ms() if cpu else None  # a GPU's host cost is train_ops' (steptime.host)
    # BF16 only where the CPU runs it natively (elsewhere its convolutions take ~60x longer, converted op by op)
    native_bf16 = cpu and bf16_units(cpu_flags()) != "none"
    conv_seq = {p: conv_sequence_share(p) for p in (("fp32", "bf16") if native_bf16 else ("fp32",))} if cpu else {}
    write_json(
        {"hardware_id": hw_id, "threads": int(cfg.threads), "allocator": allocator, "null_step_ms": overhead}
        | ({"module_call_ms": issue["ms"], "module_call_probes_ms": issue["probes"]} if issue else {})
        | (
            {
                "conv_sequence_share": {p: r["share"] for p, r in conv_seq.items()},
                "conv_sequence_rounds": {p: r["rounds"] for p, r in conv_seq.items()},
            }
            if conv_seq
            else {}
        ),
        cfg.paths.step_overhead,
    )
    metrics = {
        "measured": df.height,
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
        "allocator": allocator,
        **schedule.summary(),
        # with rounds > 1: the median over steps of the round-to-round spread (IQR / median), else of the blocks' in one round
        "noise_floor_median_spread_pct": float(100 * df["spread_rel"].median()),
        "null_step_ms": overhead,
        "module_call_us": round(1e3 * issue["ms"], 2) if issue else None,
        "conv_sequence_share": {p: round(r["share"], 4) for p, r in conv_seq.items()} or None,
        "host_probe": probe.summary(),
    }
    record_metrics(cfg, "benchmark_models", metrics)
    print(f"benchmark_models: {df.height} model steps -> {cfg.paths.model_timings}")
    if schedule.note:  # a progress bar cut short says why here
        print(f"benchmark_models: {schedule.note}")
    return metrics


if __name__ == "__main__":
    hydra_entry(benchmark_models)()
