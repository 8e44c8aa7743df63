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
import datetime as dt
import json
import subprocess
from pathlib import Path

from omegaconf import DictConfig

from pipeline.config import REPO_ROOT, load_params, run_guarded
from pipeline.shards import KINDS, merge_rows, merged_path
from prenet.data.io import write_table
from prenet.data.schemas import FinetuneRuns, LossCurves, OutcomeTelemetry, RawTimings
from prenet.data.shard_files import atomic_write_bytes


def _tables(cfg: DictConfig, kind_name: str, rows: list[dict]) -> list[Path]:
    out = Path(cfg.paths.distributed)
    if kind_name == "benchmark":
        from prenet.measurement.runner import timings_frame

        cols = list(RawTimings.to_schema().columns)
        p = write_table(timings_frame([{c: r[c] for c in cols if c in r} for r in rows]), out / "benchmark_timings.parquet", RawTimings)
        return [Path(p)]
    if kind_name == "corpus_boundary":
        from pipeline.corpus import generating_settings
        from pipeline.shards import corpus_from_merged

        runs, tel = corpus_from_merged(cfg)
        folder = out / "corpus"
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
        paths = [
            Path(write_table(runs.drop("split").sort("run_id"), folder / "runs.parquet")),
            Path(write_table(tel.sort("run_id", "epoch"), folder / "telemetry.parquet", OutcomeTelemetry)),
        ]
        prov = {
            "settings": generating_settings(cfg),
            "generated": dt.date.today().isoformat(),
            "code_commit": head,
            "source": "distributed",
            "hardware": list(cfg.distribute.hardware),
            "shards": list(cfg.distribute.shards),
            "runs": runs.height,
            "telemetry_rows": tel.height,
            "diverged": int(runs["diverged"].sum()),
        }
        paths.append(atomic_write_bytes(folder / "provenance.json", (json.dumps(prov, indent=1, sort_keys=True) + "\n").encode()))
        return paths
    if kind_name == "finetune":
        from pipeline.finetune import finetune_tables

        runs, curves = finetune_tables([(r["run"], r["curves"]) for r in rows], cfg, int(cfg.distribute.workers))
        return [
            Path(write_table(runs, out / "finetune" / "runs.parquet", FinetuneRuns)),
            Path(write_table(curves, out / "finetune" / "curves.parquet", LossCurves)),
        ]
    return []


def merge(cfg: DictConfig, kind_name: str) -> dict:
    """Merge ``kind_name``'s shards (see the module docstring); returns counts and the files written."""
    rows, dropped = merge_rows(cfg, kind_name)
    merged = merged_path(cfg, kind_name)
    atomic_write_bytes(merged, b"".join((json.dumps(r, sort_keys=True, default=float) + "\n").encode() for r in rows))
    written = [merged, *_tables(cfg, kind_name, rows)]
    print(f"merge {kind_name}: {len(rows)} items ({dropped} duplicates dropped) -> {', '.join(map(str, written))}", flush=True)
    return {"items": len(rows), "duplicates_dropped": dropped, "written": [str(p) for p in written]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pipeline.merge_shards", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=list(KINDS), help="the kind of work whose shards to merge")
    ap.add_argument("--params", default="params.yaml", help="configuration file (default: params.yaml)")
    a = ap.parse_args(argv)
    run_guarded(lambda: merge(load_params(a.params), a.kind))


if __name__ == "__main__":
    main()
