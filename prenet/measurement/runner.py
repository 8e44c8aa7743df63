"""Resumable benchmark runner.

Every finished measurement is appended as one JSON line to a shard file of this run and flushed to disk
(``fsync``) before the next starts, so an interrupted run — even ``kill -9`` — loses at most the
measurement in flight. A new run reads every shard, skips the measurement ids already done and writes a
new shard; the result table is assembled from the shards for exactly the requested plan.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import torch
from tqdm.auto import tqdm

if TYPE_CHECKING:
    import polars as pl

from prenet.data.shard_files import read_shards
from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS, layer_type
from prenet.measurement.steps import make_step
from prenet.measurement.timer import time_callable

TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class MeasurementSpec:
    """One thing to time: a layer configuration in a direction (with an optimizer for ``train_step``)."""

    op: str
    shape: tuple[tuple[str, int], ...]
    direction: str
    optimizer: str

    @property
    def shape_dict(self) -> dict[str, int]:
        return dict(self.shape)


def measurement_plan(ops: dict[str, dict[str, Any]], *, directions: Iterable[str], optimizers: Iterable[str], seed: int) -> list[MeasurementSpec]:
    """Sample ``n_configs`` configurations per op from its ``space`` and expand them over directions
    (``train_step`` once per optimizer, and only for ops with parameters). Each op draws from its own stream seeded by (seed, op), so adding an
    op or changing one op's count leaves the other ops' configurations unchanged."""
    plan: list[MeasurementSpec] = []
    directions = list(directions)
    optimizers = list(optimizers)
    for op in sorted(ops):
        lt = layer_type(op)
        spec = ops[op]
        rng = np.random.default_rng([seed, zlib.crc32(op.encode())])
        seen: set[tuple] = set()
        for _ in range(int(spec["n_configs"])):
            cfg = lt.complete(lt.sample(rng, dict(spec["space"])))
            shape = tuple(sorted(cfg.items()))
            if shape in seen:
                continue
            seen.add(shape)
            for d in directions:
                if d == "train_step" and not lt.trainable:
                    continue  # nothing to update: the op's training step is its forward_backward
                for o in optimizers if d == "train_step" else ["none"]:
                    plan.append(MeasurementSpec(op, shape, d, o))
    return plan


def measurement_id(spec: MeasurementSpec, *, hardware_id: str, device: str, threads: int, dtype: str, torch_version: str) -> str:
    """Stable identity of a measurement: what was timed, where, with how many threads and which torch."""
    payload = json.dumps([hardware_id, device, threads, dtype, torch_version, spec.op, list(spec.shape), spec.direction, spec.optimizer])
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def run_benchmark(plan: list[MeasurementSpec], *, hardware: HardwareSpec, **options: Any) -> "pl.DataFrame":
    """:func:`measure` on ``hardware`` (same keyword options) as a polars frame: the raw-timings table."""
    return timings_frame(measure(plan, hardware_id=hardware.hardware_id, **options))


def measure(
    plan: list[MeasurementSpec],
    *,
    hardware_id: str,
    shard_dir: str | Path,
    device: str = "cpu",
    threads: int = 1,
    dtype: str = "float32",
    warmup: int = 2,
    repeats: int = 5,
    min_block_ms: float = 5.0,
    max_seconds: float | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Measure every pending item of ``plan`` and return the rows of the whole plan (one per measurement).

    Times are per iteration in ms (median over ``repeats``). ``threads`` is applied with
    ``torch.set_num_threads`` and recorded in every row with the hardware it ran on. ``max_seconds`` stops
    early (the next run resumes).
    """
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    tv = torch.__version__.split("+")[0]
    ids = [measurement_id(s, hardware_id=hardware_id, device=device, threads=threads, dtype=dtype, torch_version=tv) for s in plan]
    done = {r["measurement_id"] for r in read_shards(shard_dir)}
    pending = [(i, s) for i, s in zip(ids, plan) if i not in done]
    started = time.monotonic()
    # a new shard per run (never appended to: a killed run may have left a torn last line in its own)
    shard = shard_dir / f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
    with shard.open("x") as out:
        bar = tqdm(pending, desc=f"benchmark {hardware_id} ({threads} thread(s))", unit="meas", disable=not progress)
        for mid, spec in bar:
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                bar.write(f"benchmark: stopping after {max_seconds:.0f} s; run again to resume")
                break
            row = measure_one(
                spec,
                mid,
                hardware_id=hardware_id,
                device=device,
                threads=threads,
                dtype=dtype,
                warmup=warmup,
                repeats=repeats,
                min_block_ms=min_block_ms,
            )
            out.write(json.dumps(row) + "\n")
            out.flush()
            os.fsync(out.fileno())
    if shard.exists() and shard.stat().st_size == 0:
        shard.unlink()
    wanted = set(ids)
    rows: dict[str, dict[str, Any]] = {}
    for r in read_shards(shard_dir):
        if r["measurement_id"] in wanted and r["measurement_id"] not in rows:
            rows[r["measurement_id"]] = r
    return [rows[i] for i in ids if i in rows]


def measure_one(
    spec: MeasurementSpec, mid: str, *, hardware_id: str, device: str, threads: int, dtype: str, warmup: int, repeats: int, min_block_ms: float
) -> dict[str, Any]:
    """Time one measurement (seeded by its id) on ``device`` and return its raw-timings row (times in ms per
    iteration, median over ``repeats``; the thread count and hardware recorded with it)."""
    torch.manual_seed(zlib.crc32(mid.encode()))
    lt = layer_type(spec.op)
    module, x = lt.build(spec.shape_dict, device, TORCH_DTYPES[dtype])
    step = make_step(module, x, spec.direction, spec.optimizer)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    t = time_callable(step, warmup=warmup, repeats=repeats, min_block_ms=min_block_ms, sync=sync)
    return {
        "measurement_id": mid,
        "hardware_id": hardware_id,
        "device": device,
        "threads": threads,
        "torch_version": torch.__version__.split("+")[0],
        "dtype": dtype,
        "op": spec.op,
        "direction": spec.direction,
        "optimizer": spec.optimizer,
        **{c: spec.shape_dict.get(c) for c in ALL_SHAPE_COLUMNS},
        "time_ms": t.median_ms,
        "time_ms_min": t.min_ms,
        "time_ms_iqr": t.iqr_ms,
        "spread_rel": t.spread_rel,
        "repeats": t.repeats,
        "number": t.number,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def timings_frame(rows: list[dict[str, Any]]) -> "pl.DataFrame":
    """Rows → a polars frame with the raw-timings column types (see ``prenet.data.schemas.RawTimings``)."""
    import polars as pl

    schema: dict[str, pl.DataType] = {
        "measurement_id": pl.String,
        "hardware_id": pl.String,
        "device": pl.String,
        "threads": pl.Int64,
        "torch_version": pl.String,
        "dtype": pl.String,
        "op": pl.String,
        "direction": pl.String,
        "optimizer": pl.String,
        **{c: pl.Int64 for c in ALL_SHAPE_COLUMNS},
        "time_ms": pl.Float64,
        "time_ms_min": pl.Float64,
        "time_ms_iqr": pl.Float64,
        "spread_rel": pl.Float64,
        "repeats": pl.Int64,
        "number": pl.Int64,
        "measured_at": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
