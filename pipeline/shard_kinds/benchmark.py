"""The layer benchmark of ``conf/benchmark``, timed on each shard's own hardware (every hardware runs every shape)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.shards import Kind
from pipeline.shards import container as _container


def _benchmark_settings(cfg: DictConfig) -> dict:
    return {
        "benchmark": _container(cfg.benchmark),
        "hardware": _container(cfg.hardware),
        "seed": int(cfg.seed),
        "threads": int(cfg.threads),
        "keep_freed_memory": bool(cfg.keep_freed_memory),
    }


def _benchmark_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    import torch

    from prenet.hardware.local import detect_local
    from prenet.measurement import measurement_plan
    from prenet.measurement.runner import measurement_id

    b = cfg.benchmark
    hw = detect_local(threads=int(cfg.threads), device=cfg.hardware.device)
    plan = measurement_plan(_container(b.ops), directions=b.directions, optimizers=b.optimizers, seed=int(cfg.seed))
    tv = torch.__version__.split("+")[0]
    opts = {
        "hardware_id": hw.hardware_id,
        "device": str(cfg.hardware.device),
        "threads": int(cfg.threads),
        "dtype": str(b.dtype),
        "warmup": int(b.warmup),
        "repeats": int(b.repeats),
        "min_block_ms": float(b.min_block_ms),
        "keep_freed_memory": bool(cfg.keep_freed_memory),
    }
    # the key is the shape's identity without the hardware (every machine measures the same keys)
    out = []
    for s in plan:
        key = measurement_id(s, hardware_id="", device="", threads=0, dtype=str(b.dtype), torch_version="")
        out.append(
            (
                key,
                (
                    s,
                    measurement_id(
                        s, hardware_id=hw.hardware_id, device=opts["device"], threads=opts["threads"], dtype=opts["dtype"], torch_version=tv
                    ),
                    opts,
                ),
            )
        )
    return out


def _benchmark_work(item: tuple) -> dict:
    from prenet.measurement.allocator import host_allocator
    from prenet.measurement.runner import measure_one

    spec, mid, opts = item
    opts = dict(opts)
    allocator = host_allocator(bool(opts.pop("keep_freed_memory", False)))
    return {**measure_one(spec, mid, **opts), "allocator": allocator}


def _benchmark_tables(cfg: DictConfig, rows: list[dict]) -> list[Path]:
    """``benchmark_timings.parquet`` (``RawTimings``, every hardware id)."""
    from prenet.data.io import write_table
    from prenet.data.schemas import RawTimings

    out = Path(cfg.paths.distributed)
    from prenet.measurement.runner import timings_frame

    cols = list(RawTimings.to_schema().columns)
    p = write_table(timings_frame([{c: r[c] for c in cols if c in r} for r in rows]), out / "benchmark_timings.parquet", RawTimings)
    return [Path(p)]


KINDS = {"benchmark": Kind("benchmark", _benchmark_items, _benchmark_work, _benchmark_settings, tables=_benchmark_tables, per_hardware=True)}
