"""The early-success corpus: ``corpus_prior``, then ``corpus_boundary`` (its boundary and take-off runs planned from the
merged prior results, exactly as the ``corpus`` stage plans them)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig

from pipeline.shards import Kind, read_merged
from prenet.errors import PrenetError


def _corpus_settings(cfg: DictConfig) -> dict:
    from pipeline.corpus import generating_settings

    return generating_settings(cfg)


def _corpus_prior_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.corpus import corpus_plan

    return [(s.run_id, (s.__dict__, phase)) for s, phase in corpus_plan(cfg)]


def _corpus_boundary_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.corpus import corpus_plan, prior_results

    prior = read_merged(cfg, "corpus_prior")
    first = {s.run_id for s, _ in corpus_plan(cfg)}
    return [
        (s.run_id, (s.__dict__, phase))
        for s, phase in corpus_plan(cfg, prior_results(prior, int(cfg.outcome.corpus.takeoff_epoch)))
        if s.run_id not in first
    ]


def _corpus_initargs(cfg: DictConfig) -> tuple:
    c = cfg.outcome.corpus
    return int(c.fashion_train), int(c.fashion_test)


def _corpus_work(item: tuple[dict, str]) -> dict:
    from pipeline.corpus import _work

    return _work(item)


def _corpus_init(fashion_train: int, fashion_test: int) -> None:
    from pipeline.corpus import _init

    _init(fashion_train, fashion_test)


def corpus_from_merged(cfg: DictConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus tables (runs with the frozen split, telemetry) from the merged prior and boundary results: the
    same plan and the same assembly as the single-machine ``corpus`` stage."""
    from pipeline.corpus import corpus_plan, corpus_tables, prior_results

    done = {**read_merged(cfg, "corpus_prior"), **read_merged(cfg, "corpus_boundary")}
    plan = corpus_plan(cfg, prior_results(read_merged(cfg, "corpus_prior"), int(cfg.outcome.corpus.takeoff_epoch)))
    missing = [s.run_id for s, _ in plan if s.run_id not in done]
    if missing:
        raise PrenetError(
            f"{len(missing)} planned corpus runs are in no merged shard (e.g. {missing[0]}); the shards were made with "
            "other settings: re-run `prenet distribute corpus`"
        )
    return corpus_tables(plan, done, cfg)


def _corpus_tables(cfg: DictConfig, rows: list[dict]) -> list[Path]:
    """``corpus/`` with ``runs.parquet``, ``telemetry.parquet`` and ``provenance.json``: the vendored corpus's layout
    (train on it with ``paths.outcome_vendored=data/distributed/corpus``)."""
    from pipeline.config import REPO_ROOT
    from prenet.data.io import write_table
    from prenet.data.schemas import OutcomeTelemetry
    from prenet.data.shard_files import atomic_write_bytes

    out = Path(cfg.paths.distributed)
    from pipeline.corpus import generating_settings

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


KINDS = {
    "corpus_prior": Kind("corpus_prior", _corpus_prior_items, _corpus_work, _corpus_settings, _corpus_init, _corpus_initargs),
    "corpus_boundary": Kind(
        "corpus_boundary",
        _corpus_boundary_items,
        _corpus_work,
        _corpus_settings,
        _corpus_init,
        _corpus_initargs,
        tables=_corpus_tables,
        needs=("corpus_prior",),
    ),
}
