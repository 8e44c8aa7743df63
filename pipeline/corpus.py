"""Stage ``corpus``: the early-success run corpus — short training runs with telemetry, over sampled
hyperparameters enriched near the success/failure boundary and at late take-off. Resumable (fsync'ed JSONL shards) and parallel
(``outcome.corpus.workers`` processes of ``threads`` threads each)."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from pipeline.split import outcome_split_rule
from prenet.data.io import read_table, validate
from prenet.data.schemas import OutcomeRuns, OutcomeTelemetry
from prenet.data.shard_files import read_shards
from prenet.data.split_rule import assign_frame
from prenet.datasets import require_datasets
from prenet.outcome.generator import SOURCE_DATASET, RunResult, RunSpec, domain_data, is_failure, plan_domain, train_run, with_optimizer_columns
from prenet.outcome.models import accuracy_at
from prenet.outcome.telemetry_input import with_absent_columns
from prenet.telemetry.recorder import telemetry_schema

_DATA: dict = {}


def _init(fashion_train: int, fashion_test: int) -> None:
    _DATA["args"] = (fashion_train, fashion_test)


def _work(item: tuple[dict, str]) -> dict:
    spec_d, phase = item
    spec = RunSpec(**spec_d)
    if spec.dataset not in _DATA:
        _DATA[spec.dataset] = domain_data(spec.dataset, fashion_train=_DATA["args"][0], fashion_test=_DATA["args"][1])
    tr, va, te = _DATA[spec.dataset]
    res = train_run(spec, tr, va, te)
    return {"run_id": spec.run_id, "spec": spec_d, "phase": phase, **res}


def _run_all(items: list[tuple[RunSpec, str]], done: dict, shard_dir: Path, cfg: DictConfig, desc: str) -> None:
    c = cfg.outcome.corpus
    todo = [(s.__dict__, ph) for s, ph in items if s.run_id not in done]
    if not todo:
        return
    shard = shard_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
    with shard.open("x") as out:
        for r in run_items(
            _work,
            todo,
            workers=int(c.workers),
            threads=int(cfg.threads),
            desc=desc,
            progress=bool(cfg.progress),
            unit="run",
            initializer=_init,
            initargs=(int(c.fashion_train), int(c.fashion_test)),
        ):
            out.write(json.dumps(r, default=float) + "\n")
            out.flush()
            os.fsync(out.fileno())
            done[r["run_id"]] = r


def corpus_plan(cfg: DictConfig, results: dict[str, RunResult] | None = None) -> list[tuple[RunSpec, str]]:
    """Every planned run of the configured domains as (spec, phase): the prior runs only without ``results``, all
    runs (prior, then boundary and take-off) with the prior runs' :func:`prior_results`. Deterministic in the seed."""
    c = cfg.outcome.corpus
    space = OmegaConf.to_container(c.space, resolve=True)
    kw = dict(
        n_runs=int(c.runs_per_domain),
        prior_fraction=float(c.prior_fraction),
        epochs=int(c.epochs),
        seed=int(cfg.seed),
        failure_fraction=float(cfg.outcome.failure_fraction),
        takeoff_runs=int(c.takeoff_runs),
        takeoff_below=float(c.takeoff_below),
        enrich=OmegaConf.to_container(c.enrich, resolve=True) if "enrich" in c else None,
    )
    return [it for d in c.domains for it in plan_domain(str(d), space, prior_results=results, **kw)]


def prior_results(done: dict[str, dict], epoch: int) -> dict[str, RunResult]:
    """(final test accuracy, diverged, accuracy at ``epoch`` as :func:`prenet.outcome.models.accuracy_at` reads it) by
    run id, from finished run results: what the boundary and take-off planning need."""
    ids = list(done)
    cols = {"run_id": pl.String, "epoch": pl.Int64, "val_accuracy": pl.Float64, "train_accuracy": pl.Float64}
    rows = [{"run_id": k, **{c: r.get(c) for c in list(cols)[1:]}} for k in ids for r in done[k]["rows"]]
    early = accuracy_at(pl.DataFrame({"run_id": ids}, schema={"run_id": pl.String}), pl.DataFrame(rows, schema=cols), epoch)
    return {k: (done[k]["final_test_accuracy"], done[k]["diverged"], float(a)) for k, a in zip(ids, early)}


def corpus_tables(plan: list[tuple[RunSpec, str]], done: dict[str, dict], cfg: DictConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus's runs table (with the frozen split) and telemetry table from the finished results of ``plan``
    (``done``: run id → :func:`_work`'s result), validated."""
    runs, tel = [], []
    for spec, phase in plan:
        r = done[spec.run_id]
        runs.append(
            {
                "run_id": spec.run_id,
                **spec.__dict__,
                "arch": spec.arch,
                "dataset": spec.dataset,
                "phase": phase,
                "final_test_accuracy": r["final_test_accuracy"],
                "diverged": r["diverged"],
                "wall_seconds": r["wall_seconds"],
                "recorder_seconds": r["recorder_seconds"],
                "threads": int(cfg.threads),
            }
        )
        tel += [{"run_id": spec.run_id, **row} for row in r["rows"]]
    df = assign_frame(pl.DataFrame(runs), outcome_split_rule(cfg)).select(list(OutcomeRuns.to_schema().columns))
    return validate(df, OutcomeRuns), validate(pl.DataFrame(tel, schema={"run_id": pl.String, **telemetry_schema()}), OutcomeTelemetry)


def generating_settings(cfg: DictConfig) -> dict:
    """The settings that determine the corpus's content (what the vendored copy records and is checked against):
    ``outcome.corpus`` without how it is run (source, workers, overhead_runs), the failure fraction and the seed."""
    c = OmegaConf.to_container(cfg.outcome.corpus, resolve=True)
    for k in ("source", "workers", "overhead_runs"):
        c.pop(k, None)
    return {"corpus": c, "failure_fraction": float(cfg.outcome.failure_fraction), "seed": int(cfg.seed)}


def _per_domain(df: pl.DataFrame, failure_fraction: float) -> dict:
    """Per domain: counts, the failure rate the prior yields (the failure rule with the domain's threshold taken over
    all its runs), median accuracy and wall time, optimizer and schedule counts."""

    def failure_rate(g: pl.DataFrame) -> float:
        thr = failure_fraction * float(g["final_test_accuracy"].quantile(0.9, "linear"))
        return float(np.mean([is_failure(a, d, thr) for a, d in zip(g["final_test_accuracy"], g["diverged"])]))

    return {
        d: {
            "runs": g.height,
            "failure_rate": failure_rate(g),
            "holdout": int((g["split"] == "holdout").sum()),
            "diverged": int(g["diverged"].sum()),
            "median_final_accuracy": float(g["final_test_accuracy"].median()),
            "median_wall_seconds": float(g["wall_seconds"].median()),
            "optimizers": dict(sorted(g["optimizer"].value_counts().iter_rows())),
            "schedules": dict(sorted(g["schedule"].value_counts().iter_rows())),
        }
        for (d,), g in df.group_by(["domain"], maintain_order=True)
    }


def read_vendored(cfg: DictConfig) -> dict:
    """Write the vendored corpus (``paths.outcome_vendored``) as this run's corpus, after checking that it was made with
    exactly this configuration's settings (:func:`generating_settings`); the split is re-assigned by the frozen
    rule. Returns ``metrics/corpus.json``."""
    from prenet.errors import PrenetError

    folder = Path(cfg.paths.outcome_vendored)
    prov_path = folder / "provenance.json"
    if not prov_path.exists():
        raise PrenetError(
            f"no vendored corpus in {folder} (provenance.json missing); regenerate it with `python -m pipeline.corpus corpus=full` "
            "and `python scripts/vendor_corpus.py`"
        )
    prov = json.loads(prov_path.read_text())
    want = generating_settings(cfg)
    if prov["settings"] != want:
        diff = sorted(k for k in set(prov["settings"]["corpus"]) | set(want["corpus"]) if prov["settings"]["corpus"].get(k) != want["corpus"].get(k))
        diff += [k for k in ("failure_fraction", "seed") if prov["settings"][k] != want[k]]
        raise PrenetError(
            f"the vendored corpus in {folder} was made with other settings ({', '.join(diff) or 'structure'} differ); "
            "restore them in conf/outcome/quick.yaml or regenerate with corpus=full (outcome.corpus.source=generate)"
        )
    runs = read_table(folder / "runs.parquet")
    tel = read_table(folder / "telemetry.parquet")
    tel, filled = with_optimizer_columns(runs, tel)  # recorded before the recorder read the optimizer: the runs' own settings
    if filled:
        print(f"corpus: {folder} predates the optimizer columns; {', '.join(filled)} are the runs' own settings and schedules")
    tel, absent = with_absent_columns(tel)
    if absent:  # recorded by an older recorder: those columns are unknown, as in a user's table without them
        print(f"corpus: {folder} has no {', '.join(absent)} (an older recorder); they are left empty, their features unknown")
    tel = validate(tel, OutcomeTelemetry, source=folder / "telemetry.parquet")
    df = assign_frame(runs.drop("split") if "split" in runs.columns else runs, outcome_split_rule(cfg))
    write_artifact(df.select(list(OutcomeRuns.to_schema().columns)), cfg, "outcome_runs")
    write_artifact(tel, cfg, "outcome_telemetry")
    per_domain = _per_domain(df, float(cfg.outcome.failure_fraction))
    metrics = {
        "runs": df.height,
        "domains": per_domain,
        "source": "vendored",
        "provenance": {k: v for k, v in prov.items() if k != "settings"},
        "recorder_time_share_pct": prov.get("recorder_time_share_pct"),
        "overhead_pct_median": prov.get("overhead_pct_median"),
        "epochs": int(cfg.outcome.corpus.epochs),
        "threads": int(cfg.threads),
    }
    record_metrics(cfg, "corpus", metrics)
    print(
        f"corpus: {df.height} vendored runs in {len(per_domain)} domains (made {prov.get('generated')}, commit {prov.get('code_commit', '?')[:10]}) "
        f"-> {cfg.paths.outcome_runs}"
    )
    return metrics


def corpus(cfg: DictConfig) -> dict:
    """The early-success corpus: the vendored one (``outcome.corpus.source=vendored``, :func:`read_vendored`), or every
    planned run trained here (prior phase, then the boundary and take-off runs planned from it). Writes ``paths.outcome_runs``,
    ``paths.outcome_telemetry`` and ``metrics/corpus.json``."""
    c = cfg.outcome.corpus
    Path(cfg.paths.outcome_shards).mkdir(parents=True, exist_ok=True)  # a declared output, empty when vendored
    if str(c.source) == "vendored":
        return read_vendored(cfg)
    if str(c.source) != "generate":
        from prenet.errors import PrenetError

        raise PrenetError(f"outcome.corpus.source={c.source!r} is not a corpus source; choose vendored or generate")
    require_datasets({SOURCE_DATASET[str(d).split("_")[1]] for d in c.domains})
    shard_dir = Path(cfg.paths.outcome_shards)
    shard_dir.mkdir(parents=True, exist_ok=True)
    done = {r["run_id"]: r for r in read_shards(shard_dir)}
    t0 = time.monotonic()
    _run_all(corpus_plan(cfg), done, shard_dir, cfg, "corpus (prior)")
    plan = corpus_plan(cfg, prior_results(done, int(c.takeoff_epoch)))
    _run_all(plan, done, shard_dir, cfg, "corpus (boundary, take-off)")
    df, tel = corpus_tables(plan, done, cfg)
    write_artifact(df, cfg, "outcome_runs")
    write_artifact(tel, cfg, "outcome_telemetry")
    overhead = float(df["recorder_seconds"].sum() / max((df["wall_seconds"] - df["recorder_seconds"]).sum(), 1e-9))
    # measured overhead: the first runs repeated with and without the recorder (same process, same seed)
    torch.set_num_threads(int(cfg.threads))
    pairs = []
    # runs at the 75th percentile of wall time: long enough for the timer, short enough for the budget
    by_time = sorted(plan, key=lambda it: done[it[0].run_id]["wall_seconds"])
    start = min(int(0.75 * len(by_time)), max(len(by_time) - int(c.overhead_runs), 0))
    data: dict[str, tuple] = {}
    for spec, _ in by_time[start : start + int(c.overhead_runs)]:
        if spec.dataset not in data:
            data[spec.dataset] = domain_data(spec.dataset, fashion_train=int(c.fashion_train), fashion_test=int(c.fashion_test))
        tr, va, te = data[spec.dataset]
        plain = train_run(spec, tr, va, te, record=False)["wall_seconds"]
        rec = train_run(spec, tr, va, te, record=True)["wall_seconds"]
        pairs.append({"run_id": spec.run_id, "domain": spec.domain, "without_s": plain, "with_s": rec, "overhead_pct": 100 * (rec - plain) / plain})
    per_domain = _per_domain(df, float(cfg.outcome.failure_fraction))
    metrics = {
        "runs": df.height,
        "domains": per_domain,
        "source": "generate",
        "settings": generating_settings(cfg),
        "recorder_time_share_pct": 100 * overhead,
        "overhead_check": pairs,
        "overhead_pct_median": float(sorted(p["overhead_pct"] for p in pairs)[len(pairs) // 2]) if pairs else None,
        "workers": int(c.workers),
        "threads": int(cfg.threads),
        "wall_s": round(time.monotonic() - t0, 1),
        "epochs": int(c.epochs),
    }
    record_metrics(cfg, "corpus", metrics)
    print(f"corpus: {df.height} runs in {len(per_domain)} domains (recorder time {100 * overhead:.1f} % of training) -> {cfg.paths.outcome_runs}")
    return metrics


if __name__ == "__main__":
    hydra_entry(corpus)()
