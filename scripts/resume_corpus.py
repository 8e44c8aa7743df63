"""Usage: python scripts/resume_corpus.py [--from DIR] [overrides ...]

Seed the corpus stage's shard folder (``paths.outcome_shards``) with the runs of a vendored corpus (default
data/outcome/vendored), so that regenerating with settings that only add runs (``python -m pipeline.corpus
corpus=full``) trains only the new ones. Every vendored run must be one the composed configuration plans, with the
same specification (its run id is a hash of it), the recorded generating settings must equal this configuration's
but for ``takeoff_runs`` and ``enrich``, and the code must still reproduce them: the shortest vendored run of each domain that did
not diverge is trained again and must give the same first two epochs (:func:`reproduces`). A change to the generator
files since (their SHA-256 in the provenance) is printed; one that shows only after epoch 2 (a schedule, say) is not
caught by that check: regenerate in full after such a change. When a check fails, nothing
is written and it exits 2. Under a minute.
"""

from __future__ import annotations

import argparse
import hashlib
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


def settings_changed(old: dict | None, new: dict) -> list[str]:
    """The generating settings (``pipeline.corpus.generating_settings``) that differ between a corpus's provenance and
    this configuration, other than ``takeoff_runs`` and ``enrich`` (more or fewer take-off or recipe runs plan the
    others the same way only while every old run stays planned, which :func:`main` checks separately). A missing
    provenance differs in all."""
    if not old:
        return ["all (no recorded settings)"]
    was, now = old.get("corpus", {}), new["corpus"]
    # a corpus made before the take-off phase recorded no take-off settings: any of them plans its runs the same way
    before_takeoff = {k: now[k] for k in now if k.startswith("takeoff_") and k not in was}
    was = {**was, **before_takeoff}
    out = [k for k in sorted(set(was) | set(now)) if k not in ("takeoff_runs", "enrich") and was.get(k) != now.get(k)]
    return out + [k for k in ("failure_fraction", "seed") if old.get(k) != new.get(k)]


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
        if len(r["rows"]) < epochs or len(new["rows"]) < epochs or new["diverged"] != r["diverged"]:
            return f"{d} run {r['run_id']}: {len(r['rows'])} epochs recorded then, {len(new['rows'])} now (diverged {r['diverged']} then, {new['diverged']} now)"
        for old_row, new_row in zip(r["rows"][:epochs], new["rows"][:epochs]):
            for col in ("train_loss", "val_accuracy"):
                x, y = float(old_row[col]), float(new_row[col])
                if abs(x - y) > rtol * max(abs(x), 1.0):
                    return f"{d} run {r['run_id']}, epoch {old_row['epoch']}: {col} {x:.6g} then, {y:.6g} now"
    return None


def main(argv: list[str] | None = None) -> int:
    import polars as pl

    from pipeline.config import compose
    from pipeline.corpus import corpus_plan, generating_settings, prior_results
    from prenet.outcome.generator import RunSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", default="data/outcome/vendored")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the regeneration (its plan does not depend on corpus=full)")
    a = ap.parse_args(argv)
    src = Path(a.src)
    prov = json.loads((src / "provenance.json").read_text())
    cfg = compose(a.overrides)
    changed = settings_changed(prov.get("settings"), generating_settings(cfg))
    if changed:
        print(
            f"resume_corpus: {src} was made with other settings ({', '.join(changed)}); only takeoff_runs and enrich may differ: regenerate in full",
            file=sys.stderr,
        )
        return 2
    code = [
        f for f, h in prov.get("generator_sha256", {}).items() if (ROOT / f).is_file() and hashlib.sha256((ROOT / f).read_bytes()).hexdigest() != h
    ]
    if code:
        print(f"resume_corpus: note: {', '.join(code)} changed since {src} was made; the reproduction check below decides")
    from prenet.outcome.generator import with_optimizer_columns
    from prenet.telemetry.recorder import TELEMETRY_FLOAT

    tel = pl.read_parquet(src / "telemetry.parquet")
    runs = pl.read_parquet(src / "runs.parquet")
    tel, filled = with_optimizer_columns(runs, tel)  # as the corpus stage reads a vendored corpus
    if filled:
        print(f"resume_corpus: {src} predates the {', '.join(filled)} columns; they are its runs' own settings and schedules")
    absent = [c for c in TELEMETRY_FLOAT if c not in tel.columns]
    if absent:  # its runs would lack what the new ones record: the features would tell the phases apart, not the runs
        print(f"resume_corpus: {src} was recorded without {', '.join(absent)}; regenerate in full", file=sys.stderr)
        return 2
    rows = shard_rows(runs, tel)
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
