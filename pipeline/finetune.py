"""Stage ``finetune``: the convergence predictor's ground truth — real fine-tuning runs over the sweep, each
logging the full-training-set loss per step, assigned to the frozen split by configuration."""

from __future__ import annotations

import time

import polars as pl
import torch
from omegaconf import DictConfig

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.pretrain import convergence_tasks
from pipeline.record import record_metrics
from pipeline.split import convergence_split_rule
from prenet.convergence.nets import n_params
from prenet.convergence.sweep import RunConfig, enumerate_sweep, task_sweep
from prenet.convergence.tasks import Task, finetune_model
from prenet.convergence.training import finetune as run_finetune
from prenet.data.io import validate
from prenet.data.schemas import FinetuneRuns, LossCurves
from prenet.data.split_rule import assign, assign_frame
from prenet.errors import PrenetError

_DATA: dict = {}


def convergence_configs(cfg: DictConfig, tasks: list) -> list:
    """The fine-tuning configurations of the convergence stages (:func:`~prenet.convergence.sweep.enumerate_sweep` of
    ``tasks`` and ``convergence.sweep``): a frozen-holdout setting with every seed of ``sweep.seeds`` (their spread is
    the seed-to-seed noise floor of each target), a development setting with ``sweep.dev_seeds`` only (null: every seed)."""
    sw = cfg.convergence.sweep
    configs = enumerate_sweep(tasks, sw)
    if sw.get("dev_seeds") is None:
        return configs
    dev_seeds, rule = {int(s) for s in sw.dev_seeds}, convergence_split_rule(cfg)
    if not dev_seeds <= {int(s) for s in sw.seeds}:
        raise PrenetError(
            f"convergence.sweep.dev_seeds={sorted(dev_seeds)} names seeds outside convergence.sweep.seeds={list(sw.seeds)}: "
            "the development settings would run none of them; give a subset of seeds (or null: every seed)"
        )
    return [c for c in configs if c.seed in dev_seeds or assign(c.group_id, rule) == "holdout"]


def task_data(task: Task):
    """The fine-tuning data of ``task``, loaded once per process (keyed by the whole task definition)."""
    key = repr(task)
    if key not in _DATA:
        _DATA[key] = task.finetune_data()
    return _DATA[key]


def _finetune_one(item: tuple[Task, RunConfig, str, float, int]) -> tuple[dict, list[dict]]:
    task, c, pretrained, head_init_scale, log_every = item
    d = task_data(task)
    model = finetune_model(task, pretrained, seed=c.seed, head_init_scale=head_init_scale)
    res = run_finetune(
        model, d.x, d.y, loss=c.loss, lr=c.lr, momentum=c.momentum, batch_size=c.batch_size, steps=c.steps, seed=c.seed, log_every=log_every
    )
    row = {
        **c.as_row(),
        "arch": task.arch,
        "n_train": len(d),
        "classes": int(d.y.max()) + 1,
        "n_params": n_params(model),
        "train_seconds": res.train_seconds,
        "diverged": res.diverged,
        "device": "cpu",
    }
    curves = [
        {"config_id": c.config_id, "source": "real", "step": int(s), "loss": float(v), "accuracy": float(a)}
        for s, v, a in zip(res.logged_steps, res.loss, res.accuracy)
    ]
    return row, curves


def finetune_tables(results: list[tuple[dict, list[dict]]], cfg: DictConfig, workers: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The runs table (frozen split by setting; ``threads`` and ``workers`` recorded) and the real loss curves from
    :func:`_finetune_one`'s results, validated."""
    runs = [{**row, "threads": int(cfg.threads), "workers": workers} for row, _ in results]
    df = assign_frame(pl.DataFrame(runs), convergence_split_rule(cfg)).select(list(FinetuneRuns.to_schema().columns))
    return validate(df, FinetuneRuns), validate(pl.DataFrame([c for _, rows in results for c in rows]), LossCurves)


def finetune(cfg: DictConfig) -> dict:
    """Fine-tune every sweep configuration (``convergence.workers`` processes); write ``paths.finetune_runs``,
    ``paths.finetune_curves`` (source ``real``) and ``metrics/finetune.json``."""
    torch.set_num_threads(int(cfg.threads))
    sw = cfg.convergence.sweep
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    configs = convergence_configs(cfg, list(tasks.values()))
    workers = int(cfg.convergence.workers)
    items = [
        (tasks[c.task], c, str(cfg.paths.pretrained), float(sw.head_init_scale), int(task_sweep(tasks[c.task], sw)["log_every"])) for c in configs
    ]
    t0 = time.monotonic()
    results = list(run_items(_finetune_one, items, workers=workers, threads=int(cfg.threads), desc="finetune", progress=bool(cfg.progress)))
    df, curves = finetune_tables(results, cfg, workers)
    write_artifact(df, cfg, "finetune_runs")
    write_artifact(curves, cfg, "finetune_curves")
    metrics = {
        "runs": df.height,
        "holdout": int((df["split"] == "holdout").sum()),
        "holdout_settings": int(df.filter(pl.col("split") == "holdout")["group_id"].n_unique()),
        "diverged": int(df["diverged"].sum()),
        "train_seconds_total": float(df["train_seconds"].sum()),
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
        "workers": workers,
    }
    record_metrics(cfg, "finetune", metrics)
    print(f"finetune: {df.height} runs ({metrics['holdout']} in the frozen holdout, {metrics['diverged']} diverged) -> {cfg.paths.finetune_runs}")
    return metrics


if __name__ == "__main__":
    hydra_entry(finetune)()
