"""Pretrain → fine-tune task pairs, from plain configuration mappings (``conf/convergence/*.yaml``).

A task names a dataset, an architecture, the classes (or relabelling) of the pre-training problem and those
of the fine-tuning problem. Pre-training uses Adam on the dataset's training split; fine-tuning sets are drawn
from the same split (seeded, ``n_train`` samples). Weights are saved as ``state_dict`` (safetensors-like
plain tensors via ``torch.save``) and loaded with ``weights_only=True``: never pickle.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from prenet import datasets
from prenet.convergence import nets
from prenet.convergence.evaluation import task_regime
from prenet.errors import PrenetError


@dataclass(frozen=True)
class Problem:
    """``classes``: kept classes (renumbered in order) or null for all; ``relabel``: {old: new} applied after."""

    classes: tuple[int, ...] | None
    relabel: dict[int, int] | None

    @staticmethod
    def from_cfg(c: Mapping[str, Any] | None) -> "Problem":
        c = dict(c or {})
        rel = c.get("relabel")
        if isinstance(rel, str) and rel.startswith("mod"):
            k = int(rel[3:])
            rel = {i: i % k for i in range(10)}
        return Problem(tuple(c["classes"]) if c.get("classes") is not None else None, {int(k): int(v) for k, v in dict(rel).items()} if rel else None)

    def apply(self, d: datasets.ImageData, *, limit: int | None = None, seed: int = 0) -> datasets.ImageData:
        return d.select(
            list(self.classes) if self.classes else (None if not self.relabel else sorted(self.relabel)), relabel=self.relabel, limit=limit, seed=seed
        )


@dataclass(frozen=True)
class Task:
    name: str
    dataset: str
    arch: str
    widths: tuple[int, ...]
    image_size: int
    pretrain: Problem
    finetune: Problem
    pretrain_epochs: int
    pretrain_lr: float
    pretrain_batch: int
    pretrain_limit: int | None
    n_train: int
    lrs: tuple[float, ...]
    regime: str
    sweep: dict | None = None

    @staticmethod
    def from_cfg(name: str, c: Mapping[str, Any]) -> "Task":
        p = dict(c.get("pretrain", {}))
        f = dict(c.get("finetune", {}))
        return Task(
            name=name,
            dataset=str(c["dataset"]),
            arch=str(c["arch"]),
            widths=tuple(int(w) for w in c["widths"]),
            image_size=int(c.get("image_size", 8 if c["dataset"] == "digits" else 28)),
            pretrain=Problem.from_cfg(p),
            finetune=Problem.from_cfg(f),
            pretrain_epochs=int(p.get("epochs", 15)),
            pretrain_lr=float(p.get("lr", 3e-3)),
            pretrain_batch=int(p.get("batch_size", 64)),
            pretrain_limit=p.get("limit"),
            n_train=int(f.get("n_train", 512)),
            lrs=tuple(float(x) for x in c["lrs"]),
            regime=task_regime(c),
            sweep=dict(c["sweep"]) if c.get("sweep") else None,
        )

    def _data(self, split: str = "train") -> datasets.ImageData:
        d = datasets.load(self.dataset, split)
        if d.x.shape[-1] != self.image_size:
            d = datasets.ImageData(
                d.name,
                torch.nn.functional.interpolate(d.x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False),
                d.y,
                d.source,
            )
        return d

    def pretrain_data(self) -> datasets.ImageData:
        return self.pretrain.apply(self._data(), limit=self.pretrain_limit, seed=1)

    def finetune_data(self, seed: int = 0) -> datasets.ImageData:
        return self.finetune.apply(self._data(), limit=self.n_train, seed=seed)

    @property
    def finetune_classes(self) -> int:
        return int(self.finetune_data().y.max()) + 1

    def build(self, classes: int) -> nn.Module:
        return nets.build(self.arch, image_size=self.image_size, classes=classes, widths=list(self.widths))

    def fingerprint(self) -> str:
        """Hash of what the pre-trained weights depend on (the fine-tuning settings are not part of it)."""
        keys = ("dataset", "arch", "widths", "image_size", "pretrain", "pretrain_epochs", "pretrain_lr", "pretrain_batch", "pretrain_limit")
        return hashlib.sha256(json.dumps({k: getattr(self, k) for k in keys}, default=str, sort_keys=True).encode()).hexdigest()[:12]


def tasks_from_cfg(cfg: Mapping[str, Any]) -> list[Task]:
    return [Task.from_cfg(str(k), v) for k, v in dict(cfg).items()]


def pretrain(task: Task, *, seed: int = 0) -> tuple[nn.Module, dict]:
    """Train ``task``'s network on its pre-training problem (Adam, cross-entropy). Returns the model (eval
    mode) and a record: training/test accuracy, seconds, parameter count."""
    data = task.pretrain_data()
    torch.manual_seed(seed)
    model = task.build(int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=task.pretrain_lr)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    model.train()
    for _ in range(task.pretrain_epochs):
        perm = torch.randperm(len(data), generator=g)
        for i in range(0, len(data), task.pretrain_batch):
            b = perm[i : i + task.pretrain_batch]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(data.x[b]), data.y[b]).backward()
            opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    test = task.pretrain.apply(task._data("test"))
    with torch.no_grad():
        acc = float((model(data.x).argmax(1) == data.y).float().mean())
        test_acc = float((model(test.x).argmax(1) == test.y).float().mean())
    return model, {
        "task": task.name,
        "arch": task.arch,
        "dataset": task.dataset,
        "data_source": data.source,
        "pretrain_samples": len(data),
        "pretrain_classes": int(data.y.max()) + 1,
        "train_accuracy": acc,
        "test_accuracy": test_acc,
        "seconds": seconds,
        "n_params": nets.n_params(model),
        "fingerprint": task.fingerprint(),
    }


def save(model: nn.Module, record: dict, folder: str | Path) -> Path:
    """``<folder>/<task>.pt`` (state_dict of plain tensors) and ``<task>.json`` (record)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['task']}.pt"
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
    (folder / f"{record['task']}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def load_pretrained(task: Task, folder: str | Path, *, device: str | torch.device = "cpu") -> nn.Module:
    """The pre-trained network of ``task`` (``weights_only=True``), in eval mode."""
    path = Path(folder) / f"{task.name}.pt"
    if not path.exists():
        raise PrenetError(f"{path} does not exist; run the pretrain stage first (dvc repro pretrain)")
    rec = json.loads(path.with_suffix(".json").read_text())
    if rec.get("fingerprint") != task.fingerprint():
        raise PrenetError(f"{path} was pre-trained for a different definition of task {task.name!r}; rerun the pretrain stage")
    model = task.build(int(rec["pretrain_classes"]))
    model.load_state_dict(torch.load(path, weights_only=True, map_location="cpu"))
    return model.to(device).eval()


def finetune_model(task: Task, folder: str | Path, *, seed: int, device: str | torch.device = "cpu", head_init_scale: float = 1.0) -> nn.Module:
    """The pre-trained network with a fresh head for the fine-tuning classes (drawn from ``seed``)."""
    model = load_pretrained(task, folder)
    return nets.with_new_head(model, task.finetune_classes, seed=seed, init_scale=head_init_scale).to(device).eval()
