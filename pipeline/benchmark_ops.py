"""Stage ``benchmark_ops``: real training steps of sampled layers and blocks on the local CPU, every ATen op timed in
place (FP32, and a share under BF16 autocast), plus the BF16-autocast whole-step ground truth of a few zoo models."""

from __future__ import annotations

import time

import polars as pl
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from pipeline.artifacts import write_artifact
from pipeline.benchmark_models import measure_zoo
from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from prenet.errors import PrenetError
from prenet.hardware.local import detect_local
from prenet.measurement.allocator import host_allocator
from prenet.measurement.models import model_timing_schema
from prenet.measurement.ops import across_rounds_frame, forward_flops, measure_config, sample_blocks, sample_configs, sample_wide
from prenet.measurement.probe import SpeedProbe
from prenet.measurement.timer import RoundSchedule


def benchmark_ops(cfg: DictConfig) -> dict:
    """Write ``paths.op_timings`` (one row per timed op), ``paths.model_timings_bf16`` and
    ``metrics/benchmark_ops.json``."""
    b = cfg.ops.benchmark
    torch.set_num_threads(int(cfg.threads))
    allocator = host_allocator(bool(cfg.keep_freed_memory))
    # the benchmark stage's record of this CPU (the spec the op models are fitted with), measured again only where it
    # describes another CPU or thread count (detect_cpu: ~5 s of GEMM and bandwidth readings)
    hw = detect_local(threads=int(cfg.threads), device="cpu", record=cfg.paths.hardware_record)
    configs = sample_configs(
        OmegaConf.to_container(cfg.benchmark.ops, resolve=True), per_kind=int(b.configs_per_kind), seed=int(b.seed), max_flops=float(b.max_flops)
    )
    wide_spaces = OmegaConf.to_container(b.wide, resolve=True) if b.get("wide") is not None else {}
    wide = sample_wide(wide_spaces, seed=int(b.seed), aligned_share=float(b.get("aligned_share", 0.0)))
    todo = [(kind, c, ("sgd", "adam")[i % 2], "fp32") for i, (kind, c) in enumerate(configs + wide)]
    # more blocks in FP32 (ops.benchmark.fp32_blocks, as bf16_native_blocks): the depthwise family's own data
    fp32_blocks = OmegaConf.to_container(b.fp32_blocks, resolve=True) if b.get("fp32_blocks") else {}
    blocks = sample_blocks(fp32_blocks, seed=int(b.seed), where="ops.benchmark.fp32_blocks")
    todo += [(kind, c, ("sgd", "adam")[i % 2], "fp32") for i, (kind, c) in enumerate(blocks)]
    # ... and spaces measured in FP32 only (ops.benchmark.fp32_wide, as `wide`; none of them under BF16 autocast)
    fp32_spaces = OmegaConf.to_container(b.fp32_wide, resolve=True) if b.get("fp32_wide") else {}
    fp32_wide = sample_wide(fp32_spaces, seed=int(b.seed), aligned_share=float(b.get("aligned_share", 0.0)))
    todo += [(kind, c, ("sgd", "adam")[i % 2], "fp32") for i, (kind, c) in enumerate(fp32_wide)]
    todo += [
        (kind, c, "sgd", "bf16")
        for i, (kind, c) in enumerate(configs)
        if i % int(b.bf16_every) == 0 and forward_flops(kind, c) <= float(b.bf16_max_flops) and kind not in ("lstm", "gru", "rnn")
    ]
    wide_bf16 = set(b.get("wide_bf16_kinds") or [])
    wide_cap = float(b.get("wide_bf16_max_flops", b.bf16_max_flops))

    def wide_in_bf16(caps: dict[str, float]) -> list[tuple[str, dict]]:
        """The wide configurations (every bf16_every-th) whose kind has a cap in ``caps`` and whose forward FLOPs are
        within it."""
        return [(k, c) for i, (k, c) in enumerate(wide) if i % int(b.bf16_every) == 0 and k in caps and forward_flops(k, c) <= caps[k]]

    generic = wide_in_bf16({k: wide_cap for k in wide_bf16})
    todo += [(kind, c, "sgd", "bf16") for kind, c in generic]
    # blocks whose BF16 kernels run unlike their FP32 ones, measured again under BF16 autocast where the CPU runs BF16
    # natively (elsewhere BF16 is emulated, slow, and answered as such): conf ops.benchmark.bf16_native_blocks, and
    # larger wide configurations of some kinds (ops.benchmark.wide_bf16_native: kind -> forward FLOPs cap)
    native_bf16 = hw.extra.get("bf16_units", "none") != "none"
    native_blocks = OmegaConf.to_container(b.bf16_native_blocks, resolve=True) if b.get("bf16_native_blocks") else {}
    extra_bf16 = sample_blocks(native_blocks, seed=int(b.seed)) if native_bf16 else []
    todo += [(kind, c, "sgd", "bf16") for kind, c in extra_bf16]
    native_caps = {str(k): float(v) for k, v in (b.get("wide_bf16_native") or {}).items()} if native_bf16 else {}
    todo += [(kind, c, "sgd", "bf16") for kind, c in wide_in_bf16(native_caps) if (kind, c) not in generic]
    # ... and spaces of their own, measured under BF16 only (ops.benchmark.bf16_native_wide, as `wide`): corners where
    # BF16 kernels run unlike FP32 ones, whose FP32 rows would move the FP32 answers the zoo already checks
    native_spaces = OmegaConf.to_container(b.bf16_native_wide, resolve=True) if native_bf16 and b.get("bf16_native_wide") else {}
    todo += [(kind, c, "sgd", "bf16") for kind, c in sample_wide(native_spaces, seed=int(b.seed), aligned_share=float(b.get("aligned_share", 0.0)))]
    # ... and spaces measured under BF16 only on every CPU (ops.benchmark.bf16_wide): power-of-two widths, whose rows
    # alias in the caches where ATen's reference loops run BF16 GEMMs (no BF16 units)
    bf16_spaces = OmegaConf.to_container(b.bf16_wide, resolve=True) if b.get("bf16_wide") else {}
    todo += [(kind, c, "sgd", "bf16") for kind, c in sample_wide(bf16_spaces, seed=int(b.seed), aligned_share=0.0)]
    skipped: list[str] = []
    t0 = time.monotonic()
    probe = SpeedProbe(int(cfg.threads))  # host speed beside every row (prenet/measurement/probe.py)
    # rounds beyond min_rounds only while they end within rounds_budget_s (a slower host measures fewer rounds)
    schedule = RoundSchedule.from_config(len(todo), b, b.get("rounds_budget_s"))
    per_step: list[list[pl.DataFrame]] = [[] for _ in todo]
    # interleaved rounds (every step once per round, in turn), each op its fastest round: a minute of a noisy
    # neighbour slows one round of every op, not all the ops measured in that minute (prenet.measurement.timer)
    for r, i in tqdm(schedule, desc="benchmark ops", unit="step", disable=not cfg.progress):
        kind, c, opt, prec = todo[i]
        if r > 0 and not per_step[i]:
            continue  # skipped in the first round
        p_ms = probe.sample()
        torch.manual_seed(int(cfg.seed))
        try:
            f = measure_config(
                kind,
                c,
                optimizer=opt,
                precision=prec,
                min_block_ms=float(b.min_block_ms),
                repeats=int(b.repeats),
                warmup=bool(b.get("warmup_step", True)),
            )
            per_step[i].append(f.with_columns(pl.lit(p_ms).alias("probe_ms")))
        except PrenetError as e:  # e.g. oneDNN has no BF16 kernel for an op on this CPU: recorded, not hidden
            skipped.append(f"{kind} {prec}: {e}"[:200])
    frames = [across_rounds_frame(fs) for fs in per_step if fs]
    ops = pl.concat(frames, how="vertical_relaxed").with_columns(
        pl.lit("local").alias("source"),
        pl.lit(hw.hardware_id).alias("hardware_id"),
        pl.lit(int(cfg.threads), dtype=pl.Int64).alias("threads"),
        pl.lit(0, dtype=pl.Int64).alias("tf1"),
        pl.lit(torch.__version__.split("+")[0]).alias("torch_version"),
    )
    ops = ops.filter(pl.col("measured_ms") > 0)
    write_artifact(ops, cfg, "op_timings")
    # the BF16-autocast zoo steps, timed as benchmark_models times the FP32 ones (interleaved rounds, fastest kept), the
    # probe before every step as there (sharing the ops' 5 s probe, the 5 steps carried one distinct sample)
    zoo_probe = SpeedProbe(int(cfg.threads), every_s=0.0)
    zoo_rows, zoo_schedule = measure_zoo(
        cfg,
        [(str(n), int(bs), "sgd") for n, bs in [*b.zoo_bf16, *((b.get("zoo_bf16_native") or []) if native_bf16 else [])]],
        hw.hardware_id,
        zoo_probe,
        precision="bf16",
        device="cpu",
        budget_s=b.get("zoo_bf16_rounds_budget_s"),
    )
    zrows = [{**row, "dtype": "bf16"} for row in zoo_rows]
    write_artifact(pl.DataFrame(zrows, schema=model_timing_schema(), orient="row"), cfg, "model_timings_bf16")
    metrics = {
        "configurations": len(configs) + len(wide),
        "wide_configurations": len(wide),
        "steps_measured": len(frames),
        "ops_measured": ops.height,
        "skipped": skipped,
        "by_precision": {p: int(n) for p, n in ops.group_by("precision").len().iter_rows()},
        "threads": int(cfg.threads),
        "allocator": allocator,
        "hardware_id": hw.hardware_id,
        "peak_fp32_tflops": hw.peak_fp32_tflops,
        "peak_bf16_tflops": hw.peak_bf16_tflops,
        **schedule.summary(),
        "zoo_bf16_rounds": zoo_schedule.summary(),
        # with rounds > 1: the median over ops of the round-to-round spread (IQR / median), else of the blocks' in one round
        "noise_floor_median_spread_pct": float(100 * ops["spread_rel"].median()),
        "zoo_bf16_steps": len(zrows),
        "host_probe": probe.summary(),
        "zoo_bf16_probe": zoo_probe.summary(),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    record_metrics(cfg, "benchmark_ops", metrics)
    print(f"benchmark_ops: {ops.height} ops from {len(frames)} steps -> {cfg.paths.op_timings}")
    for what, sched in (("op steps", schedule), ("BF16 zoo steps", zoo_schedule)):  # a progress bar cut short says why here
        if sched.note:
            print(f"benchmark_ops: {what}: {sched.note}")
    return metrics


if __name__ == "__main__":
    hydra_entry(benchmark_ops)()
