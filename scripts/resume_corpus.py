"""Usage: python scripts/resume_corpus.py [--from DIR] [overrides ...]

Seed the corpus stage's shard folder (``paths.outcome_shards``) with the runs of a vendored corpus (default
data/outcome/vendored), so that regenerating with settings that only add runs (``python -m pipeline.corpus
corpus=full``) trains only the new ones. Every vendored run must be one the composed configuration plans, with the
same specification (its run id is a hash of it), and the code must still reproduce them: the shortest vendored run of
each domain that did not diverge is trained again and must give the same first two epochs (:func:`reproduces`). Otherwise nothing is
written and it exits 2. Under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shard_rows(runs, telemetry) -> list[dict]:
    """The corpus stage's result rows (``pipeline.corpus._work``'s shape) of a corpus's runs and telemetry tables."""
    from prenet.outcome.generator import RunSpec

    fields = list(RunSpec.__dataclass_fields__)
    tel: dict[str, list[dict]] = {}
    for r in telemetry.sort("run_id", "epoch").iter_rows(named=True):
        tel.setdefault(r.pop("run_id"), []).append(r)
    out = []
    for r in runs.iter_rows(named=True):
        spec = {f: r[f] for f in fields}
        out.append(
            {
                "run_id": r["run_id"],
                "spec": spec,
                "phase": r["phase"],
                "rows": tel.get(r["run_id"], []),
                **{k: r[k] for k in ("final_test_accuracy", "diverged", "wall_seconds", "recorder_seconds")},
            }
        )
    return out


def reproduces(rows: list[dict], cfg, epochs: int = 2, rtol: float = 1e-4) -> str | None:
    """None when the shortest run that did not diverge of each domain among ``rows`` trains again to the same first
    ``epochs`` epochs: training loss within ``rtol`` (relative) and validation accuracy within ``rtol``. Later epochs
    are not compared: float summation order differs between hosts, and a chaotic run (a large step) amplifies it."""
    import torch

    from prenet.outcome.generator import RunSpec, domain_data, train_run

    torch.set_num_threads(int(cfg.threads))
    c = cfg.outcome.corpus
    shortest: dict[str, dict] = {}
    for r in (r for r in rows if not r["diverged"]):
        d = r["spec"]["domain"]
        if d not in shortest or r["wall_seconds"] < shortest[d]["wall_seconds"]:
            shortest[d] = r
    for d, r in shortest.items():
        spec = RunSpec(**r["spec"])
        new = train_run(spec, *domain_data(spec.dataset, fashion_train=int(c.fashion_train), fashion_test=int(c.fashion_test)))
        for old_row, new_row in zip(r["rows"][:epochs], new["rows"][:epochs]):
            for col in ("train_loss", "val_accuracy"):
                x, y = float(old_row[col]), float(new_row[col])
                if abs(x - y) > rtol * max(abs(x), 1.0):
                    return f"{d} run {r['run_id']}, epoch {old_row['epoch']}: {col} {x:.6g} then, {y:.6g} now"
    return None


def main(argv: list[str] | None = None) -> int:
    import polars as pl

    from pipeline.config import compose
    from pipeline.corpus import corpus_plan, prior_results
    from prenet.outcome.generator import RunSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", default="data/outcome/vendored")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the regeneration (its plan does not depend on corpus=full)")
    a = ap.parse_args(argv)
    src = Path(a.src)
    prov = json.loads((src / "provenance.json").read_text())
    cfg = compose(a.overrides)
    rows = shard_rows(pl.read_parquet(src / "runs.parquet"), pl.read_parquet(src / "telemetry.parquet"))
    done = {r["run_id"]: r for r in rows}
    bad = [r["run_id"] for r in rows if RunSpec(**r["spec"]).run_id != r["run_id"]]
    planned = {s.run_id for s, _ in corpus_plan(cfg, prior_results(done, int(cfg.outcome.corpus.takeoff_epoch)))}
    bad += [k for k in done if k not in planned]
    if bad:
        print(
            f"resume_corpus: {len(bad)} runs of {src} (e.g. {bad[0]}) are not planned by this configuration; "
            "its settings changed more than adding runs: regenerate in full",
            file=sys.stderr,
        )
        return 2
    diff = reproduces(rows, cfg)
    if diff:
        print(f"resume_corpus: this code no longer reproduces {src}'s runs ({diff}): regenerate in full", file=sys.stderr)
        return 2
    shards = Path(cfg.paths.outcome_shards)
    shards.mkdir(parents=True, exist_ok=True)
    path = shards / f"resumed-from-{src.name}-{uuid.uuid4().hex[:8]}.jsonl"
    with path.open("x") as f:
        for r in rows:
            f.write(json.dumps(r, default=float) + "\n")
        f.flush()
        os.fsync(f.fileno())
    print(
        f"resume_corpus: {len(rows)} runs of {src} (commit {str(prov.get('code_commit', '?'))[:10]}) -> {path}; {len(planned) - len(rows)} left to train"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
