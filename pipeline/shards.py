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
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    whose merge a shard reads (reproduced first on its machine, from the DVC remote's run-cache). ``tables(cfg, rows)``:
    the tables the single-machine stage would write, from the merged rows (the files written)."""

    name: str
    items: Callable[[DictConfig], list[tuple[str, Any]]]
    work: Callable[[Any], Any]
    settings: Callable[[DictConfig], dict]
    initializer: Callable[..., None] | None = None
    initargs: Callable[[DictConfig], tuple] = lambda cfg: ()
    tables: Callable[[DictConfig, list[dict]], list[Path]] = lambda cfg, rows: []
    per_hardware: bool = False
    needs: tuple[str, ...] = ()


def container(node: Any) -> Any:
    """A config node as plain Python (JSON-able settings)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


# ---- early-success corpus ------------------------------------------------------------------------------------------


def merged_path(cfg: DictConfig, kind: str) -> Path:
    """Where the merge of ``kind``'s shards is written (a JSONL of every result, each key once, sorted)."""
    return Path(cfg.paths.distributed) / f"{kind}.jsonl"


def shard_dir(cfg: DictConfig, kind: str) -> Path:
    """The folder of ``kind``'s promoted shards (``<hardware>-<shard>.jsonl``)."""
    return Path(cfg.paths.distributed) / "shards" / kind


def read_merged(cfg: DictConfig, kind: str) -> dict[str, dict]:
    """The merged results of ``kind`` by key; one line naming the stage to run when the merge is missing."""
    p = merged_path(cfg, kind)
    if not p.exists():
        raise PrenetError(f"{p} is missing: merge the {kind} shards first (`dvc repro distributed/dvc.yaml:merge_{kind}`)")
    return {r[KEY]: r for r in read_rows(p)}


#: The kinds of work, each defined in the module ``pipeline.shard_kinds.<KIND_MODULE[kind]>``.
KIND_MODULE: dict[str, str] = {"benchmark": "benchmark", "corpus_prior": "corpus", "corpus_boundary": "corpus", "finetune": "finetune"}
KINDS: tuple[str, ...] = tuple(KIND_MODULE)
#: What `prenet distribute <work>` submits, in order (the corpus needs its prior phase merged before the boundary).
WORK: dict[str, tuple[str, ...]] = {"benchmark": ("benchmark",), "corpus": ("corpus_prior", "corpus_boundary"), "finetune": ("finetune",)}


def kind(name: str) -> Kind:
    """The definition of kind ``name``, imported from its own module only."""
    if name not in KIND_MODULE:
        raise PrenetError(f"{name!r} is not a distributable kind of work; choose one of {', '.join(KINDS)}")
    return importlib.import_module(f"pipeline.shard_kinds.{KIND_MODULE[name]}").KINDS[name]


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
