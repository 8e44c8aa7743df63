"""Stage ``<kind>@<hardware>-<shard>`` of ``distributed/dvc.yaml``: run one shard of one kind of work on this machine.

    python -m pipeline.shard corpus_prior cpu 0 [--params params.yaml] [--dask tcp://scheduler:8786]

Refuses unless this machine declares ``PRENET_HARDWARE=<hardware>``. Resumes from its scratch JSONL
(``distribute.scratch``, outside every DVC output), appends and fsyncs each finished item, then promotes the
finished shard atomically into ``<paths.distributed>/<kind>/<hardware>-<shard>.jsonl`` (the stage's output).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from omegaconf import DictConfig

from pipeline.config import load_params, run_guarded
from pipeline.pool import run_items
from pipeline.shards import KINDS, kind, settings_digest, shard_dir, slot
from prenet.data.shard_files import KEY, append_row, check_hardware, open_scratch, promote, retire, shard_slice


def scratch_path(cfg: DictConfig, kind_name: str, hardware: str, shard: int) -> Path:
    """The running shard's scratch JSONL; named by the settings digest, so a changed configuration starts afresh."""
    return Path(cfg.distribute.scratch) / kind_name / f"{hardware}-{shard}-{settings_digest(cfg, kind(kind_name))}.jsonl"


def _keyed(item: tuple) -> tuple[str, object]:
    key, payload, work = item
    return key, work(payload)


def run_shard(cfg: DictConfig, kind_name: str, hardware: str, shard: int) -> dict:
    """Run shard ``shard`` of ``kind_name`` for ``hardware`` (``distribute.shards`` shards per hardware id) on this
    machine and promote it. Returns counts: items, resumed (done before this run), ran, seconds."""
    k = kind(kind_name)
    check_hardware(hardware)
    index, count = slot(cfg, k, hardware, shard)
    mine = shard_slice(k.items(cfg), index, count)
    scratch = scratch_path(cfg, kind_name, hardware, shard)
    fh, done = open_scratch(scratch)
    todo = [(key, payload, k.work) for key, payload in mine if key not in done]
    t0 = time.monotonic()
    print(f"{kind_name}@{hardware}-{shard}: {len(mine)} items, {len(mine) - len(todo)} already done (scratch {scratch})", flush=True)
    with fh:
        for key, result in run_items(
            _keyed,
            todo,
            workers=int(cfg.distribute.workers),
            threads=int(cfg.threads),
            desc=f"{kind_name}@{hardware}-{shard}",
            progress=bool(cfg.progress),
            unit="item",
            initializer=k.initializer,
            initargs=k.initargs(cfg) if k.initializer else (),
        ):
            append_row(fh, {KEY: key, "hardware": hardware, **(result if isinstance(result, dict) else {"result": result})})
    out = shard_dir(cfg, kind_name) / f"{hardware}-{shard}.jsonl"
    n = promote(scratch, out, [key for key, _ in mine])
    retire(scratch)  # a re-run (code or inputs changed) starts afresh; the finished scratch stays as <name>.done
    print(f"{kind_name}@{hardware}-{shard}: {n} items promoted -> {out}", flush=True)
    return {"items": len(mine), "resumed": len(mine) - len(todo), "ran": len(todo), "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pipeline.shard", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=list(KINDS), help="the kind of work")
    ap.add_argument("hardware", help="the hardware id the shard was created for (must equal this machine's PRENET_HARDWARE)")
    ap.add_argument("shard", type=int, help="the shard number (one of distribute.shards)")
    ap.add_argument("--params", default="params.yaml", help="configuration file (default: params.yaml)")
    ap.add_argument("--dask", metavar="ADDRESS", help="run the items as Prefect tasks on this Dask scheduler (prefect-dask), e.g. tcp://host:8786")
    a = ap.parse_args(argv)
    if a.dask:
        from pipeline.distribute import run_shard_on_dask

        run_guarded(lambda: print(run_shard_on_dask(load_params(a.params), a.kind, a.hardware, a.shard, a.dask)))
        return
    run_guarded(lambda: run_shard(load_params(a.params), a.kind, a.hardware, a.shard))


if __name__ == "__main__":
    main()
