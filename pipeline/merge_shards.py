"""Stage ``merge_<kind>`` of ``distributed/dvc.yaml``: the only writer of a kind's merged result on the coordinator.

    python -m pipeline.merge_shards corpus_boundary [--params params.yaml]

Reads every promoted shard the configuration asks for (hardware × shard numbers), keeps each natural key once,
sorts by key and writes ``<paths.distributed>/<kind>.jsonl``, plus the tables the single-machine stage would have
written (below). Every file is replaced atomically, so an interrupted merge leaves the last good output in place.

* ``benchmark`` → ``benchmark_timings.parquet`` (``RawTimings``, every hardware id);
* ``corpus_boundary`` → ``corpus/`` with ``runs.parquet``, ``telemetry.parquet`` and ``provenance.json``, the layout
  of the vendored corpus (train on it with ``paths.outcome_vendored=data/distributed/corpus``);
* ``finetune`` → ``finetune/runs.parquet`` and ``finetune/curves.parquet`` (``FinetuneRuns``, ``LossCurves``).
"""

from __future__ import annotations

import argparse
import json

from omegaconf import DictConfig

from pipeline.config import load_params, run_guarded
from pipeline.shards import KINDS, kind, merge_rows, merged_path
from prenet.data.shard_files import atomic_write_bytes


def merge(cfg: DictConfig, kind_name: str) -> dict:
    """Merge ``kind_name``'s shards (see the module docstring); returns counts and the files written."""
    rows, dropped = merge_rows(cfg, kind_name)
    merged = merged_path(cfg, kind_name)
    atomic_write_bytes(merged, b"".join((json.dumps(r, sort_keys=True, default=float) + "\n").encode() for r in rows))
    written = [merged, *kind(kind_name).tables(cfg, rows)]
    print(f"merge {kind_name}: {len(rows)} items ({dropped} duplicates dropped) -> {', '.join(map(str, written))}", flush=True)
    return {"items": len(rows), "duplicates_dropped": dropped, "written": [str(p) for p in written]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pipeline.merge_shards", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=KINDS, help="the kind of work whose shards to merge")
    ap.add_argument("--params", default="params.yaml", help="configuration file (default: params.yaml)")
    a = ap.parse_args(argv)
    run_guarded(lambda: merge(load_params(a.params), a.kind))


if __name__ == "__main__":
    main()
