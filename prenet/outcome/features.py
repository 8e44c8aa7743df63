"""Features of the early-success models: a run's telemetry up to epoch e, flattened.

* ``loss_acc``: train loss and train accuracy at each epoch k ≤ e, and their change over the last epoch.
* ``telemetry``: ``loss_acc`` plus, at each epoch k ≤ e, log10 gradient SNR (global and median), log10 mean
  gradient norm, weight-norm ratio, relative weight distance, per-layer norm ratio (max, mean); and, from epoch 2
  on, the activation-saturation snapshot (dead-ReLU fraction, saturated tanh/sigmoid fraction).

No hyperparameter and no domain enters: the models read one run's own telemetry, never other runs' configs.
Missing values (a diverged run's losses, the snapshot of a model without such activations) stay NaN; the
gradient-boosted trees route them.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

FEATURE_SETS = ("telemetry", "loss_acc")
PER_EPOCH_TEL = ("log10_grad_snr", "log10_grad_snr_median", "grad_norm", "weight_norm_ratio", "weight_distance",
                 "layer_norm_ratio_max", "layer_norm_ratio_mean")
SNAPSHOT = ("dead_relu_frac", "saturated_frac")


def feature_names(epoch: int, feature_set: str) -> list[str]:
    names = [f"{c}_e{k}" for k in range(1, epoch + 1) for c in ("train_loss", "train_accuracy")]
    names += ["d_train_loss", "d_train_accuracy"]
    if feature_set == "telemetry":
        names += [f"{c}_e{k}" for k in range(1, epoch + 1) for c in PER_EPOCH_TEL]
        if epoch >= 2:
            names += list(SNAPSHOT)
    return names


def _row(tel: dict[int, dict], epoch: int, feature_set: str) -> list[float]:
    def get(k: int, c: str) -> float:
        v = tel.get(k, {}).get(c)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return float("nan")
        return math.log10(max(v, 1e-12)) if c == "grad_norm" else float(v)

    out = [get(k, c) for k in range(1, epoch + 1) for c in ("train_loss", "train_accuracy")]
    prev = epoch - 1 if epoch > 1 else None
    out += [get(epoch, "train_loss") - get(prev, "train_loss") if prev else float("nan"),
            get(epoch, "train_accuracy") - get(prev, "train_accuracy") if prev else float("nan")]
    if feature_set == "telemetry":
        out += [get(k, c) for k in range(1, epoch + 1) for c in PER_EPOCH_TEL]
        if epoch >= 2:
            out += [get(2, c) for c in SNAPSHOT]
    return out


def design(telemetry: pl.DataFrame, run_ids: list[str], epoch: int, feature_set: str) -> np.ndarray:
    """(runs × features) for the runs ``run_ids`` (in that order) from a long telemetry table (run_id, epoch, …)."""
    by_run: dict[str, dict[int, dict]] = {}
    for r in telemetry.filter(pl.col("epoch") <= epoch).iter_rows(named=True):
        by_run.setdefault(r["run_id"], {})[int(r["epoch"])] = r
    return np.array([_row(by_run.get(rid, {}), epoch, feature_set) for rid in run_ids], dtype=float).reshape(len(run_ids), -1)


def single_run(table: pl.DataFrame, epoch: int, feature_set: str = "telemetry") -> np.ndarray:
    """Features of one run's recorder table (``Recorder.table()``), 1 × features."""
    return design(table.with_columns(pl.lit("run").alias("run_id")), ["run"], epoch, feature_set)
