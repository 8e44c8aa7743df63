"""Stage ``pretrain``: train the small source networks of the convergence tasks (no weights can be downloaded)."""

from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf

from pipeline.config import hydra_entry
from pipeline.record import record_metrics
from prenet.convergence.tasks import pretrain as pretrain_task
from prenet.convergence.tasks import save, tasks_from_cfg


def convergence_tasks(cfg: DictConfig):
    return tasks_from_cfg({k: v for k, v in OmegaConf.to_container(cfg.convergence.tasks, resolve=True).items() if v is not None})


def pretrain(cfg: DictConfig) -> dict:
    """Pre-train every task's network and save ``paths.pretrained/<task>.pt`` (state_dict) + ``.json``;
    write ``metrics/pretrain.json``."""
    torch.set_num_threads(int(cfg.threads))
    records = {}
    for task in convergence_tasks(cfg):
        model, rec = pretrain_task(task, seed=int(cfg.seed))
        save(model, rec, cfg.paths.pretrained)
        records[task.name] = {
            **{k: rec[k] for k in ("arch", "dataset", "data_source", "pretrain_samples", "train_accuracy", "test_accuracy", "n_params")},
            "wall_s": rec["seconds"],
        }
        print(f"pretrain: {task.name}: {rec['n_params']:,} parameters, test accuracy {rec['test_accuracy']:.3f} ({rec['seconds']:.1f} s)")
    record_metrics(cfg, "pretrain", {"tasks_pretrained": len(records), "tasks": records, "threads": int(cfg.threads)})
    return records


if __name__ == "__main__":
    hydra_entry(pretrain)()
