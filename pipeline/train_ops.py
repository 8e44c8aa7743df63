"""Stage ``train_ops``: the CPU part of the op-level efficiency models (``prenet/steptime/efficiency.py``), fitted on the
local CPU's op benchmark and never its frozen holdout (keyed by configuration). ``train_gpu_ops`` fits the GPU part;
``EfficiencyModel.load(paths.models_ops)`` answers with both."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from pipeline.config import hydra_entry
from pipeline.op_tables import fit_part, part_summary, split_ops
from pipeline.record import record_metrics
from prenet.hardware.local import recorded_spec


def train_ops(cfg: DictConfig) -> dict:
    """Write ``paths.models_ops_cpu`` and ``metrics/train_ops.json``."""
    t0 = time.monotonic()
    ops = split_ops(cfg, "op_timings")
    model = fit_part(cfg, ops, recorded_spec(cfg.paths.hardware_record), where="train_ops")
    model.save(cfg.paths.models_ops_cpu)
    metrics = {
        **part_summary(model, ops),
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
    }
    record_metrics(cfg, "train_ops", metrics)
    print(f"train_ops: {len(model.boosters)} CPU efficiency models ({metrics['dev_ops']} ops) -> {cfg.paths.models_ops_cpu}")
    return metrics


if __name__ == "__main__":
    hydra_entry(train_ops)()
