"""What each distributable kind of work is: its items (sampled from the fixed seed, so every machine sees the same
list), how one item runs, and how the merged results become the tables the single-machine stage would write.

Kinds (``distributed/dvc.yaml`` has one matrix stage per kind, ``<kind>@<hardware>-<shard>``):

* ``benchmark`` — the layer benchmark of ``conf/benchmark`` timed on the shard's own hardware;
* ``corpus_prior`` then ``corpus_boundary`` — the early-success corpus (the boundary runs are planned from the
  merged prior results, exactly as the ``corpus`` stage plans them);
* ``finetune`` — the convergence sweep's fine-tunes (needs the ``pretrain`` stage's models).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig, OmegaConf

from prenet.data.shard_files import KEY, merge_lines, read_rows
from prenet.errors import PrenetError


@dataclass(frozen=True)
class Kind:
    """One distributable kind of work. ``items(cfg)`` → [(natural key, picklable item)] in a fixed order;
    ``work(item)`` (module level, for worker processes) → a JSON-able result; ``initializer(*initargs(cfg))`` runs
    once per process; ``settings(cfg)`` is everything that decides the results (a changed setting starts a new
    scratch instead of resuming an old one). ``per_hardware``: every hardware id runs all items (a benchmark times
    the same shapes on each device); otherwise the items are split over all (hardware, shard) slots. ``needs``: kinds
    whose merge a shard reads (reproduced first on its machine, from the DVC remote's run-cache)."""

    name: str
    items: Callable[[DictConfig], list[tuple[str, Any]]]
    work: Callable[[Any], Any]
    settings: Callable[[DictConfig], dict]
    initializer: Callable[..., None] | None = None
    initargs: Callable[[DictConfig], tuple] = lambda cfg: ()
    per_hardware: bool = False
    needs: tuple[str, ...] = ()


def _container(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


# ---- early-success corpus ------------------------------------------------------------------------------------------


def merged_path(cfg: DictConfig, kind: str) -> Path:
    """Where the merge of ``kind``'s shards is written (a JSONL of every result, each key once, sorted)."""
    return Path(cfg.paths.distributed) / f"{kind}.jsonl"


def shard_dir(cfg: DictConfig, kind: str) -> Path:
    """The folder of ``kind``'s promoted shards (``<hardware>-<shard>.jsonl``)."""
    return Path(cfg.paths.distributed) / "shards" / kind


def _corpus_settings(cfg: DictConfig) -> dict:
    from pipeline.corpus import generating_settings

    return generating_settings(cfg)


def _corpus_prior_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.corpus import corpus_plan

    return [(s.run_id, (s.__dict__, phase)) for s, phase in corpus_plan(cfg)]


def read_merged(cfg: DictConfig, kind: str) -> dict[str, dict]:
    """The merged results of ``kind`` by key; one line naming the stage to run when the merge is missing."""
    p = merged_path(cfg, kind)
    if not p.exists():
        raise PrenetError(f"{p} is missing: merge the {kind} shards first (`dvc repro distributed/dvc.yaml:merge_{kind}`)")
    return {r[KEY]: r for r in read_rows(p)}


def _corpus_boundary_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.corpus import corpus_plan, prior_results

    prior = read_merged(cfg, "corpus_prior")
    first = {s.run_id for s, _ in corpus_plan(cfg)}
    return [(s.run_id, (s.__dict__, phase)) for s, phase in corpus_plan(cfg, prior_results(prior)) if s.run_id not in first]


def _corpus_initargs(cfg: DictConfig) -> tuple:
    c = cfg.outcome.corpus
    return int(c.fashion_train), int(c.fashion_test)


def _corpus_work(item: tuple[dict, str]) -> dict:
    from pipeline.corpus import _work

    return _work(item)


def _corpus_init(fashion_train: int, fashion_test: int) -> None:
    from pipeline.corpus import _init

    _init(fashion_train, fashion_test)


# ---- layer benchmark -----------------------------------------------------------------------------------------------


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


# ---- fine-tuning sweep ---------------------------------------------------------------------------------------------


def _finetune_settings(cfg: DictConfig) -> dict:
    conv = {k: v for k, v in _container(cfg.convergence).items() if k != "workers"}
    return {"convergence": conv, "seed": int(cfg.seed), "threads": int(cfg.threads)}


def _finetune_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.pretrain import convergence_tasks
    from prenet.convergence.sweep import enumerate_sweep, task_sweep

    sw = cfg.convergence.sweep
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    return [
        (c.config_id, (tasks[c.task], c, str(cfg.paths.pretrained), float(sw.head_init_scale), int(task_sweep(tasks[c.task], sw)["log_every"])))
        for c in enumerate_sweep(list(tasks.values()), sw)
    ]


def _finetune_work(item: tuple) -> dict:
    from pipeline.finetune import _finetune_one

    row, curves = _finetune_one(item)
    return {"run": row, "curves": curves}


KINDS: dict[str, Kind] = {
    "benchmark": Kind("benchmark", _benchmark_items, _benchmark_work, _benchmark_settings, per_hardware=True),
    "corpus_prior": Kind("corpus_prior", _corpus_prior_items, _corpus_work, _corpus_settings, _corpus_init, _corpus_initargs),
    "corpus_boundary": Kind(
        "corpus_boundary", _corpus_boundary_items, _corpus_work, _corpus_settings, _corpus_init, _corpus_initargs, needs=("corpus_prior",)
    ),
    "finetune": Kind("finetune", _finetune_items, _finetune_work, _finetune_settings),
}
#: What `prenet distribute <work>` submits, in order (the corpus needs its prior phase merged before the boundary).
WORK: dict[str, tuple[str, ...]] = {"benchmark": ("benchmark",), "corpus": ("corpus_prior", "corpus_boundary"), "finetune": ("finetune",)}


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise PrenetError(f"{name!r} is not a distributable kind of work; choose one of {', '.join(KINDS)}")
    return KINDS[name]


def settings_digest(cfg: DictConfig, k: Kind) -> str:
    """12 hex digits of the kind's settings and the shard count: the scratch of another configuration is never resumed."""
    payload = json.dumps({"settings": k.settings(cfg), "shards": len(cfg.distribute.shards)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def slot(cfg: DictConfig, k: Kind, hardware: str, shard: int) -> tuple[int, int]:
    """(index, count) of a shard among the slots its kind splits the items over: the shard numbers of its hardware
    (``per_hardware``) or every (hardware, shard) pair."""
    hws, shards = list(cfg.distribute.hardware), list(cfg.distribute.shards)
    if hardware not in hws or shard not in shards:
        raise PrenetError(
            f"{k.name}@{hardware}-{shard} is not in distribute.hardware × distribute.shards of this configuration "
            f"({hws} × {shards}); compose it with `prenet distribute ... --hardware ... --shards K` first"
        )
    if k.per_hardware:
        return shards.index(shard), len(shards)
    pairs = [(h, s) for h in hws for s in shards]
    return pairs.index((hardware, shard)), len(pairs)


def expected_shards(cfg: DictConfig, kind_name: str) -> list[Path]:
    """Every promoted shard file of ``kind_name`` the configuration asks for (hardware × shard numbers)."""
    d = shard_dir(cfg, kind_name)
    return [d / f"{hw}-{k}.jsonl" for hw in cfg.distribute.hardware for k in cfg.distribute.shards]


def merge_rows(cfg: DictConfig, kind_name: str) -> tuple[list[dict], int]:
    """The rows of every expected shard of ``kind_name``, each natural key once, sorted; and the duplicates dropped.
    One line naming the missing shards (and the stage that makes them) when any is absent."""
    paths = expected_shards(cfg, kind_name)
    missing = [p.stem for p in paths if not p.exists()]
    if missing:
        raise PrenetError(
            f"{kind_name}: shards {', '.join(missing)} are missing; run them (`prenet distribute`) or "
            f"`dvc repro --pull distributed/dvc.yaml:merge_{kind_name}` to fetch them from the remote"
        )
    return merge_lines(paths, per_hardware=kind(kind_name).per_hardware)


def corpus_from_merged(cfg: DictConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The corpus tables (runs with the frozen split, telemetry) from the merged prior and boundary results: the
    same plan and the same assembly as the single-machine ``corpus`` stage."""
    from pipeline.corpus import corpus_plan, corpus_tables, prior_results

    done = {**read_merged(cfg, "corpus_prior"), **read_merged(cfg, "corpus_boundary")}
    plan = corpus_plan(cfg, prior_results({k: v for k, v in read_merged(cfg, "corpus_prior").items()}))
    missing = [s.run_id for s, _ in plan if s.run_id not in done]
    if missing:
        raise PrenetError(
            f"{len(missing)} planned corpus runs are in no merged shard (e.g. {missing[0]}); the shards were made with "
            "other settings: re-run `prenet distribute corpus`"
        )
    return corpus_tables(plan, done, cfg)
