"""How the early-success models fare on what they never saw: leave-one-group-out (a domain, an optimizer), the
feature-group ablation, and the naive baseline a user would otherwise use (the epoch-k accuracy as the guess).

All functions take labelled runs (:func:`prenet.outcome.models.labels`) and the long telemetry table, and return
plain dicts of scores (:func:`prenet.outcome.evaluation.scores`) ready for ``metrics/outcome.json``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import polars as pl

from prenet.outcome.evaluation import auc, paired_difference, r2, scores
from prenet.outcome.features import GROUPS, feature_names
from prenet.outcome.models import accuracy_at, cv_residuals, fit_targets, predict_targets, relative_class


def naive_guess(runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int) -> dict[str, np.ndarray]:
    """The guess without a model: final accuracy = the validation accuracy at ``epoch`` (the train accuracy where no
    validation was recorded); failure score = 1 − that."""
    guess = accuracy_at(runs, telemetry, epoch)
    return {"final_test_accuracy": guess, "failure": 1.0 - guess}


def score_predictions(
    runs: pl.DataFrame, pred: dict[str, np.ndarray], n_boot: int, seed: int, thresholds: dict[str, dict[str, Any]], fallback: dict[str, Any]
) -> dict:
    """:func:`~prenet.outcome.evaluation.scores` of predictions for labelled runs; the relative class is where the
    predicted accuracy falls among each run's domain cut points (:func:`prenet.outcome.models.relative_class`)."""
    cuts = [thresholds.get(d, fallback)["class_cuts"] for d in runs["domain"].to_list()]
    pc, _ = relative_class(np.clip(pred["final_test_accuracy"], 0, 1), cuts)
    return scores(
        runs["final_test_accuracy"].to_numpy(),
        pred["final_test_accuracy"],
        runs["failure"].to_numpy(),
        pred["failure"],
        runs["relative_class"].to_numpy(),
        pc,
        n_boot,
        seed,
    )


def leave_group_out(
    train: pl.DataFrame,
    test: pl.DataFrame,
    telemetry: pl.DataFrame,
    column: str,
    value: str,
    *,
    epochs: list[int],
    params: dict,
    thresholds: dict,
    fallback: dict,
    n_boot: int,
    seed: int,
    stack_folds: int = 0,
) -> dict:
    """Fit on the ``train`` runs whose ``column`` ≠ ``value``, score on the ``test`` runs with ``column`` = ``value``.
    The telemetry model answers with the domain masked when ``column`` is the domain (as for a user's unknown
    domain, with the pooled class cut points), and the same fit also with the held-out domain's architecture and dataset
    stated (``telemetry_parts_stated``: each part seen in another domain, the pair never: a user's known dataset under a
    known architecture family that the corpus never combined). Scores of the telemetry model, the loss/accuracy-only model and the
    naive guess per epoch, and the telemetry model's R² per corpus phase of the test runs (``telemetry_r2_by_phase``:
    the prior samples users' settings; the boundary and take-off phases over-sample the hard cases on purpose).
    ``stack_folds`` > 0 (the trained models stack: :func:`~prenet.outcome.models.cv_residuals`' folds): the telemetry
    model answers the slow runs stacked as the trained models do, with a take-off model refitted on the training
    groups and the stack's weights learned out of fold on them alone (the held-out group is in neither)."""
    tr, te = train.filter(pl.col(column) != value), test.filter(pl.col(column) == value)
    if column == "domain":  # an unknown domain's relative class comes from the pooled cut points, as in predict()
        thresholds = {d: t for d, t in thresholds.items() if d != value}
    out: dict = {"train_runs": tr.height, "test_runs": te.height}
    for e in epochs:
        res = {}
        for fs in ("telemetry", "loss_acc"):
            w = cv_residuals(tr, telemetry, e, params=params, seed=seed, folds=stack_folds)[1] if fs == "telemetry" and stack_folds > 0 else None
            m = fit_targets(tr, telemetry, e, fs, params=params, seed=seed, stack=w)
            pred = predict_targets(m, te, telemetry, e, fs, known_domain=column != "domain")
            res[fs] = score_predictions(te, pred, n_boot, seed, thresholds, fallback)
            if fs == "telemetry" and "phase" in te.columns:
                res["telemetry_r2_by_phase"] = r2_by_phase(te, pred["final_test_accuracy"])
            if fs == "telemetry" and column == "domain":  # the same fit, told the held-out domain's architecture and dataset
                stated = predict_targets(m, te, telemetry, e, fs, known_domain=True)
                res["telemetry_parts_stated"] = score_predictions(te, stated, n_boot, seed, thresholds, fallback)
        res["naive"] = score_predictions(te, naive_guess(te, telemetry, e), n_boot, seed, thresholds, fallback)
        out[f"epoch_{e}"] = res
    return out


def r2_by_phase(runs: pl.DataFrame, predicted: np.ndarray, min_runs: int = 20) -> dict[str, float]:
    """R² of ``predicted`` final accuracy on each corpus phase of ``runs`` (with at least ``min_runs`` runs), and on
    all but the take-off runs (``without_takeoff``: the corpus as it was before issue 29's take-off phase)."""
    y, phase = runs["final_test_accuracy"].to_numpy(), runs["phase"].to_numpy()
    masks = {str(p): phase == p for p in np.unique(phase)} | {"without_takeoff": phase != "takeoff"}
    return {k: float(r2(y[m], np.asarray(predicted)[m])) for k, m in masks.items() if m.sum() >= min_runs}


def mean_over_groups(result: dict, epoch: int, model: str, metric: str) -> float:
    """Mean of ``metric`` over the held-out groups of :func:`leave_group_out` (NaN or missing groups skipped)."""
    vals = [g[f"epoch_{epoch}"][model].get(metric, float("nan")) for g in result.values() if f"epoch_{epoch}" in g]
    vals = [v for v in vals if np.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def fit_and_answer(item: tuple) -> dict[str, np.ndarray]:
    """One refit, a pool's unit: ``item`` = (development runs, their telemetry, the runs to answer, theirs, epoch,
    params, seed, dropped groups, more :func:`~prenet.outcome.models.fit_targets` keywords (``bag``, ``targets``),
    :func:`~prenet.outcome.models.predict_targets` keywords); the telemetry models fitted without the groups, and
    their answers."""
    dev, telemetry, hold, hold_telemetry, epoch, params, seed, drop, fit_kw, answer_kw = item
    m = fit_targets(dev, telemetry, epoch, "telemetry", params=params, seed=seed, drop=drop, **fit_kw)
    return predict_targets(m, hold, hold_telemetry, epoch, "telemetry", drop=drop, **answer_kw)


def ablate_groups(
    dev: pl.DataFrame,
    hold: pl.DataFrame,
    telemetry: pl.DataFrame,
    epoch: int,
    *,
    params: dict,
    n_boot: int,
    seed: int,
    groups: Sequence[str] = GROUPS,
    hold_telemetry: pl.DataFrame | None = None,
    stated: bool = True,
    mapper: Callable = map,
) -> dict:
    """Each feature group of ``groups`` dropped in turn from the telemetry set at ``epoch`` (``loss_acc`` is never
    dropped: it is the baseline; a group without columns at ``epoch`` is skipped): R² and failure AUC on ``hold``
    (labelled; its telemetry in ``hold_telemetry`` when it is not in ``telemetry``, answered with its domain and
    schedule when ``stated``) of the full model minus the model without the group, with a paired bootstrap
    (positive = the group helps); the accuracy model alone on both sides (no take-off stack: its take-off model
    would see the dropped group). ``mapper(fn, items)`` runs the refits (the builtin ``map``, or a process pool's)."""
    y, yf = hold["final_test_accuracy"].to_numpy(), hold["failure"].to_numpy()
    tel_h = telemetry if hold_telemetry is None else hold_telemetry
    kw = {"known_domain": stated, "known_schedule": stated}
    cols = feature_names(epoch, "telemetry")
    todo = [g for g in groups if g != "loss_acc" and len(feature_names(epoch, "telemetry", drop=(g,))) != len(cols)]
    # one fit each side, not the bag (params["bag"]): a paired difference of the recipe with and without a group, at a
    # third of the refits' cost
    items = [(dev, telemetry, hold, tel_h, epoch, params, seed, drop, {"bag": 1}, kw) for drop in [(), *((g,) for g in todo)]]
    full, *dropped = list(mapper(fit_and_answer, items))
    out = {}
    for g, p in zip(todo, dropped):
        out[g] = {
            "r2": paired_difference(r2, y, full["final_test_accuracy"], p["final_test_accuracy"], n_boot, seed),
            "failure_auc": paired_difference(auc, yf, full["failure"], p["failure"], n_boot, seed),
        }
    return out
