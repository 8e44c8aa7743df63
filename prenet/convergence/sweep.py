"""The ground-truth sweep: task × learning rate × momentum × batch size × loss × seed, each keyed by a stable
``config_id``; the frozen split is keyed by ``group_id`` (the configuration without its seed)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from itertools import product
from typing import Any, Mapping

from prenet.convergence.tasks import Task


@dataclass(frozen=True)
class RunConfig:
    task: str
    loss: str
    lr: float
    momentum: float
    batch_size: int
    seed: int
    steps: int

    @property
    def config_id(self) -> str:
        """sha256 of the canonical configuration, 16 hex digits: stable across runs and machines."""
        key = f"{self.task}|{self.loss}|lr={self.lr:.6g}|m={self.momentum:.6g}|B={self.batch_size}|seed={self.seed}|T={self.steps}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def group_id(self) -> str:
        """sha256 of the configuration without its seed, 16 hex digits: the frozen split's key, so that the seeds
        of one setting are all on the same side of the split."""
        key = f"{self.task}|{self.loss}|lr={self.lr:.6g}|m={self.momentum:.6g}|B={self.batch_size}|T={self.steps}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def as_row(self) -> dict[str, Any]:
        return {"config_id": self.config_id, "group_id": self.group_id, **asdict(self)}


def task_sweep(task: Task, sweep: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep settings of ``task``: the global ``sweep`` with the task's own ``sweep`` overrides on top."""
    return {**dict(sweep), **dict(task.sweep or {})}


def enumerate_sweep(tasks: list[Task], sweep: Mapping[str, Any]) -> list[RunConfig]:
    """Every configuration of ``sweep`` (keys: steps or epochs, momentum, batch_size, loss, seeds) for each
    task's lrs; a task's own ``sweep`` mapping overrides keys for that task. Batch sizes above a task's
    ``n_train`` are clipped to it (full batch); ``epochs`` (when set) gives steps = epochs · ⌊N/B⌋."""
    out: list[RunConfig] = []
    for t in tasks:
        sw = task_sweep(t, sweep)
        for lr, m, b, loss, seed in product(t.lrs, sw["momentum"], sw["batch_size"], sw["loss"], sw["seeds"]):
            bb = min(int(b), t.n_train)
            steps = int(sw["epochs"]) * (t.n_train // bb) if sw.get("epochs") else int(sw["steps"])
            out.append(RunConfig(t.name, str(loss), float(lr), float(m), bb, int(seed), steps))
    return list({c.config_id: c for c in out}.values())
