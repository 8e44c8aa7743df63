"""Stage ``finetune``: the convergence predictor's ground truth — real fine-tuning runs over the sweep, each
logging the full-training-set loss per step, assigned to the frozen split by configuration."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from pipeline.config import hydra_entry
from pipeline.pretrain import convergence_tasks
from pipeline.split import split_rule
from prenet.convergence.finetune import finetune as run_finetune
from prenet.convergence.nets import n_params
from prenet.convergence.sweep import enumerate_sweep, task_sweep
from prenet.convergence.tasks import finetune_model
from prenet.data.io import write_json, write_table
from prenet.data.schemas import FinetuneRuns, LossCurves
from prenet.data.split import SplitRule, assign_frame


def convergence_split_rule(cfg: DictConfig) -> SplitRule:
    return split_rule(cfg, key_column="config_id")


def finetune(cfg: DictConfig) -> dict:
    """Fine-tune every sweep configuration; write ``paths.finetune_runs``, ``paths.finetune_curves`` (source
    ``real``) and ``metrics/finetune.json``."""
    torch.set_num_threads(int(cfg.threads))
    sw = cfg.convergence.sweep
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    configs = enumerate_sweep(list(tasks.values()), sw)
    data = {name: t.finetune_data() for name, t in tasks.items()}
    runs, curves = [], []
    t0 = time.monotonic()
    for c in tqdm(configs, desc="finetune", unit="run", disable=not cfg.progress):
        task, d = tasks[c.task], data[c.task]
        model = finetune_model(task, cfg.paths.pretrained, seed=c.seed, head_init_scale=float(sw.head_init_scale))
        res = run_finetune(model, d.x, d.y, loss=c.loss, lr=c.lr, momentum=c.momentum, batch_size=c.batch_size, steps=c.steps,
                           seed=c.seed, log_every=int(task_sweep(task, sw)["log_every"]))
        runs.append({**c.as_row(), "arch": task.arch, "n_train": len(d), "classes": int(d.y.max()) + 1, "n_params": n_params(model),
                     "train_seconds": res.train_seconds, "diverged": res.diverged, "threads": int(cfg.threads), "device": "cpu"})
        curves += [{"config_id": c.config_id, "source": "real", "step": int(s), "loss": float(v), "accuracy": float(a)}
                   for s, v, a in zip(res.logged_steps, res.loss, res.accuracy)]
    df = assign_frame(pl.DataFrame(runs), convergence_split_rule(cfg))
    cols = list(FinetuneRuns.to_schema().columns)
    write_table(df.select(cols), cfg.paths.finetune_runs, FinetuneRuns)
    write_table(pl.DataFrame(curves), cfg.paths.finetune_curves, LossCurves)
    metrics = {"runs": df.height, "holdout": int((df["split"] == "holdout").sum()), "diverged": int(df["diverged"].sum()),
               "train_seconds_total": float(df["train_seconds"].sum()), "wall_s": round(time.monotonic() - t0, 1), "threads": int(cfg.threads)}
    write_json(metrics, Path(cfg.paths.metrics) / "finetune.json")
    print(f"finetune: {df.height} runs ({metrics['holdout']} in the frozen holdout, {metrics['diverged']} diverged) -> {cfg.paths.finetune_runs}")
    return metrics


if __name__ == "__main__":
    hydra_entry(finetune)()
