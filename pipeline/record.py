"""What a stage records, in one place:

* ``<paths.metrics>/<name>.json`` — the DVC metrics: a few headline scalars per stage (:data:`HEADLINE`), so that
  ``dvc metrics show`` and ``dvc metrics diff`` stay readable;
* ``<paths.plots>/<name>.json`` — the full record (every table and breakdown), read by the report, the README
  Results and the tests (git-tracked, ``cache: false``);
* ``<paths.run_log>`` — wall-clock durations, with the thread count and time of the run: one JSON line per stage run,
  outside DVC and git, so re-running a stage does not refresh tracked files with timing noise.

Keys in :data:`RUN_LOG_KEYS` (at any depth) are wall-clock durations of the stage itself; they go to the run log only.
Measured costs that are results (the forecast's seconds against training's, the 1.3B trace time) stay in the record.
"""

from __future__ import annotations

import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from prenet.data.io import write_json

#: Wall-clock durations of a stage's own work (seconds): run log only.
RUN_LOG_KEYS = frozenset({"wall_s", "train_wall_s", "selection_wall_s", "train_seconds_total"})

#: The headline scalars of each record: short metric name → key path into the record (keys may contain dots, hence
#: tuples). One flat vocabulary shared by the stages (``n``, ``mape_pct``, ``unseen_pct``…), so the table of
#: ``dvc metrics show`` (one column per distinct name) stays under 400 characters wide; the full record says more.
HEADLINE: dict[str, dict[str, tuple[str, ...]]] = {
    "benchmark": {"n": ("measured",), "noise_pct": ("noise_floor_median_spread_pct",)},
    "benchmark_models": {"n": ("measured",), "noise_pct": ("noise_floor_median_spread_pct",)},
    "benchmark_ops": {"n": ("ops_measured",), "fp32_tflops": ("peak_fp32_tflops",), "bf16_tflops": ("peak_bf16_tflops",)},
    "split": {"n": ("holdout",), "share": ("holdout_share",)},
    "train": {"mape_pct": ("val", "_pooled", "mape_pct")},
    "evaluate": {
        "mape_pct": ("overall", "mape_pct"),
        "unseen_pct": ("unseen_hardware", "mean_mape_pct", "prenet_recipe"),
    },
    "train_gpu_ops": {"eff_gpu": ("median_efficiency", "gpu")},
    "train_ops": {"eff_cpu": ("median_efficiency", "cpu")},
    "evaluate_gpu_ops": {"unseen_pct": ("unseen_gpu", "mean_mape_pct")},
    "evaluate_ops": {
        "mape_pct": ("holdout", "mape_pct"),
        "zoo_pct": ("whole_model", "fp32", "mape_pct"),
        "zoo_bf16_pct": ("whole_model", "bf16", "mape_pct"),
        "unseen_pct": ("unseen_gpu", "mean_mape_pct"),
        "mem_pct": ("memory", "mape_pct"),
        "trace_s": ("trace_seconds", "gpt_1p3b_s"),
    },
    "train_parallel": {"n": ("collectives", "fitted_rows"), "eff_nvlink": ("collectives", "nvlink", "eff_reduce")},
    "evaluate_parallel": {
        "coll_pct": ("collectives", "holdout", "mape_pct"),
        "coll_1mib_pct": ("collectives", "holdout", "mape_pct_1mib"),
        "scaling_pct": ("scaling", "mape_pct"),
    },
    "pretrain": {"n": ("tasks_pretrained",)},
    "finetune": {"n": ("runs",), "diverged": ("diverged",)},
    "forecast": {"n": ("configs",), "unreliable": ("unreliable",)},
    "convergence": {
        "n": ("holdout_configs",),
        "eps_ape_pct": ("holdout", "relative_eps=0.1", "default", "median_ape_pct"),
        "loss_ape_pct": ("holdout", "loss<=0.1*L0", "default", "median_ape_pct"),
        "acc_ape_pct": ("holdout", "accuracy>=0.9", "default", "median_ape_pct"),
    },
    "forecast_cost": {"enabled": ("enabled",), "ratio": ("summary", "default_cost_ratio"), "err": ("summary", "default_error_pct")},
    "corpus": {"n": ("runs",)},
    "train_outcome": {"n": ("models",)},
    "outcome_ooc": {"r2_e2": ("summary", "r2_epoch2"), "auc_e2": ("summary", "auc_epoch2")},
    "outcome": {
        "r2_e2": ("summary", "holdout_r2_epoch2"),
        "auc_e3": ("summary", "holdout_auc_epoch3"),
        "lodo_r2": ("summary", "lodo_mean_r2_epoch2"),
        "looo_r2": ("summary", "looo_mean_r2_epoch2"),
    },
}


def split_run_log(record: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, float]]:
    """(record without wall-clock keys, {dotted key: seconds}) — the keys of :data:`RUN_LOG_KEYS` at any depth."""
    kept: dict[str, Any] = {}
    times: dict[str, float] = {}
    for k, v in record.items():
        path = f"{prefix}{k}"
        if k in RUN_LOG_KEYS and isinstance(v, (int, float)):
            times[path] = float(v)
        elif isinstance(v, dict):
            kept[k], sub = split_run_log(v, f"{path}.")
            times.update(sub)
        else:
            kept[k] = v
    return kept, times


def headline(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """The scalars of ``record`` named by ``HEADLINE[name]``, flat under their short names (absent keys are skipped)."""
    out: dict[str, Any] = {}
    for short, keys in HEADLINE[name].items():
        node: Any = record
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        if node is not None and not isinstance(node, (dict, list)):
            out[short] = node
    return out


def record_metrics(cfg: DictConfig, name: str, record: dict[str, Any]) -> dict[str, Any]:
    """Write ``record`` the three ways described in the module docstring; returns the record without wall times."""
    kept, times = split_run_log(record)
    details = Path(cfg.paths.plots) / f"{name}.json"
    metrics = Path(cfg.paths.metrics) / f"{name}.json"
    write_json(kept, details)
    if metrics.resolve() != details.resolve():
        write_json(headline(name, kept), metrics)
    append_run_log(cfg, name, times)
    return kept


def append_run_log(cfg: DictConfig, name: str, times: dict[str, float]) -> None:
    """One JSON line in ``paths.run_log``: stage, UTC time, the machine (its CPU's hardware id), threads, seed, the
    commit checked out (with ``+`` when the tree has changes), process id and the wall-clock seconds: a wall time read
    later says where and from what it was measured."""
    from prenet.cpu_identity import cpu_id

    log = Path(cfg.paths.run_log)
    log.parent.mkdir(parents=True, exist_ok=True)
    line = {
        "stage": name,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": cpu_id(),
        "threads": int(cfg.threads),
        "seed": int(cfg.seed) if "seed" in cfg else None,
        "commit": _commit(),
        "pid": os.getpid(),
        **times,
    }
    with log.open("a") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")


@lru_cache(maxsize=1)
def _commit() -> str | None:
    """The git commit of the project checkout (``+`` when its tracked source has changes); None outside git. Read once
    per process (a stage is one)."""
    import subprocess

    from pipeline.config import REPO_ROOT

    code = ["prenet", "pipeline", "conf", "scripts"]  # the source: a run's own outputs (data/) do not make it "+"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else None


def read_record(folder: str | Path, name: str) -> dict[str, Any]:
    """The full record ``<folder>/<name>.json`` written by :func:`record_metrics` (``folder`` = ``paths.plots``)."""
    return json.loads((Path(folder) / f"{name}.json").read_text())


def last_wall_times(cfg: DictConfig) -> dict[str, dict[str, float]]:
    """{stage: its latest run-log entry} (empty when the log does not exist, e.g. on a fresh clone)."""
    log = Path(cfg.paths.run_log)
    out: dict[str, dict[str, float]] = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by an interrupted write
            out[entry.get("stage", "?")] = entry
    return out
