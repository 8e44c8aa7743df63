"""The convergence sweep's fine-tunes, split over every (hardware, shard) slot (needs the ``pretrain`` stage's models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.shards import Kind
from pipeline.shards import container as _container


def _finetune_settings(cfg: DictConfig) -> dict:
    conv = {k: v for k, v in _container(cfg.convergence).items() if k != "workers"}
    return {"convergence": conv, "split": _container(cfg.split), "seed": int(cfg.seed), "threads": int(cfg.threads)}


def _finetune_items(cfg: DictConfig) -> list[tuple[str, Any]]:
    from pipeline.finetune import convergence_configs
    from pipeline.pretrain import convergence_tasks
    from prenet.convergence.sweep import task_sweep

    sw = cfg.convergence.sweep
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    return [
        (c.config_id, (tasks[c.task], c, str(cfg.paths.pretrained), float(sw.head_init_scale), int(task_sweep(tasks[c.task], sw)["log_every"])))
        for c in convergence_configs(cfg, list(tasks.values()))
    ]


def _finetune_work(item: tuple) -> dict:
    from pipeline.finetune import _finetune_one

    row, curves = _finetune_one(item)
    return {"run": row, "curves": curves}


def _finetune_tables(cfg: DictConfig, rows: list[dict]) -> list[Path]:
    """``finetune/runs.parquet`` and ``finetune/curves.parquet`` (``FinetuneRuns``, ``LossCurves``)."""
    from prenet.data.io import write_table
    from prenet.data.schemas import FinetuneRuns, LossCurves

    out = Path(cfg.paths.distributed)
    from pipeline.finetune import finetune_tables

    runs, curves = finetune_tables([(r["run"], r["curves"]) for r in rows], cfg, int(cfg.distribute.workers))
    return [
        Path(write_table(runs, out / "finetune" / "runs.parquet", FinetuneRuns)),
        Path(write_table(curves, out / "finetune" / "curves.parquet", LossCurves)),
    ]


KINDS = {"finetune": Kind("finetune", _finetune_items, _finetune_work, _finetune_settings, tables=_finetune_tables)}
