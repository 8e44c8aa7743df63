"""Early-success models: XGBoost per (epoch, feature set, target), trained on development runs only.

Targets: ``final_test_accuracy`` (regression), ``failure`` (binary; :func:`prenet.outcome.generator.is_failure`
with each domain's threshold = ``failure_fraction`` × the 90th percentile of its development final accuracy),
and ``relative_class`` (0/1/2 = tertile of final accuracy within the domain, cut points from the development set),
which is not a model of its own: it is where the predicted accuracy falls among the domain's cut points, with
probabilities from the out-of-fold residuals (:func:`relative_class`). Beside them, per epoch, the **take-off** model:
the probability that a run still slow at that epoch (accuracy below :data:`SLOW_BELOW`) ends as a success, fitted on
the slow development runs only (issue 29's late bloomers; :func:`fit_take_off`). A slow run's accuracy answer is the
**stack** of the two (:func:`stacked_accuracy`): three weights learned out of fold on the development runs
(:func:`cv_residuals`, :func:`fit_stack`), since the classifier, fitted on the slow runs alone, ranks which take off
better than the regressor fitted on every run.
One pooled model over all domains, with the domain as a feature (:mod:`prenet.outcome.features`). Models are saved as XGBoost JSON
plus ``manifest.json`` (thresholds, cut points, feature names, residual quantiles): no pickle.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.outcome.features import FEATURE_SETS, OPTIONAL_MASKS, as_plain_log, design, feature_names, mask_groups

#: What the fitted models predict; the relative class follows from the predicted accuracy (:func:`relative_class`).
TARGETS = ("final_test_accuracy", "failure")
#: A run is still slow at an epoch while its accuracy there (validation, else train) is below this.
SLOW_BELOW = 0.5
#: Issue 29's late bloomer: slow (:data:`SLOW_BELOW`) after ``epoch`` epochs, and at least ``final_at_least`` at the end.
LATE_BLOOMER = {"epoch": 2, "below": SLOW_BELOW, "final_at_least": 0.8}


def accuracy_at(runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int) -> np.ndarray:
    """Each run's accuracy at ``epoch``: validation where recorded (not null, not NaN), else train; 0 where the epoch
    is missing. ``telemetry`` may lack ``val_accuracy`` (a recorder table without validation)."""
    val = pl.col("val_accuracy") if "val_accuracy" in telemetry.columns else pl.lit(None, dtype=pl.Float64)
    tel = telemetry.filter(pl.col("epoch") == epoch).select(
        "run_id", pl.when(val.is_null() | val.is_nan()).then(pl.col("train_accuracy")).otherwise(val).alias("accuracy")
    )
    g = runs.select("run_id").join(tel, on="run_id", how="left")
    return g["accuracy"].fill_null(0.0).fill_nan(0.0).to_numpy().astype(float)


#: Quantile levels (0, 0.05, …, 1) at which the take-off group's final accuracies are kept (:func:`take_off_interval`).
TAKE_OFF_LEVELS = 21


def may_take_off(accuracy_now: np.ndarray | float, p_take: np.ndarray | float, base_rate: float, slow_below: float) -> np.ndarray:
    """Whether a run looks like a late bloomer: still slow (accuracy now below ``slow_below``) and the take-off model
    gives it at least the base rate of the slow development runs that took off."""
    return (np.asarray(accuracy_now, dtype=float) < slow_below) & (np.asarray(p_take, dtype=float) >= base_rate)


def take_off_interval(
    low: np.ndarray, high: np.ndarray, p_take: np.ndarray, flagged: np.ndarray, took_off: list[float], upper_level: float
) -> tuple[np.ndarray, np.ndarray]:
    """The interval of a run flagged as possibly taking off, as the mixture its answer describes: with probability
    ``p_take`` it ends like the development runs that were as slow and took off (``took_off``: their final accuracies
    at :data:`TAKE_OFF_LEVELS` levels), otherwise as predicted. The mixture's ``upper_level`` quantile lies in the
    take-off component at its level 1 − (1 − upper_level) / p (the other component below it), so the upper bound
    rises to that quantile where p > 1 − upper_level; the lower bound is the prediction's. Unflagged runs, NaN
    probabilities and an empty ``took_off`` keep (low, high)."""
    high = np.asarray(high, dtype=float).copy()
    if not took_off:
        return np.asarray(low, dtype=float), high
    p = np.nan_to_num(np.asarray(p_take, dtype=float), nan=0.0)
    level = np.where(p > 0, 1.0 - (1.0 - upper_level) / np.where(p > 0, p, 1.0), -np.inf)
    up = np.interp(np.clip(level, 0, 1), np.linspace(0, 1, len(took_off)), took_off)
    use = np.asarray(flagged, dtype=bool) & (level > 0)
    high[use] = np.maximum(high[use], up[use])
    return np.asarray(low, dtype=float), high


def fit_take_off(
    runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int, *, params: dict, seed: int, min_runs: int = 20
) -> tuple[Fitted, float, list[float]] | None:
    """The take-off model of ``epoch`` on labelled development ``runs``: among those still slow there
    (:data:`SLOW_BELOW`), the probability of ending as a success (not a failure), from the telemetry features with the
    same masked copies as the other models. Returns (model, base rate: the share of slow runs that took off, the final
    accuracies of those that took off at :data:`TAKE_OFF_LEVELS` evenly spaced quantile levels 0…1), or None with
    fewer than ``min_runs`` slow runs."""
    slow = runs.filter(pl.Series(accuracy_at(runs, telemetry, epoch) < SLOW_BELOW))
    if slow.height < min_runs:
        return None
    slow = slow.with_columns((1 - pl.col("failure")).alias("take_off"))
    m = fit_targets(slow, telemetry, epoch, "telemetry", params=params, seed=seed, targets=("take_off",))["take_off"]
    took = slow.filter(pl.col("take_off") == 1)["final_test_accuracy"].to_numpy()
    levels = np.linspace(0, 1, TAKE_OFF_LEVELS)
    return m, float(slow["take_off"].mean()), [float(v) for v in np.quantile(took, levels)] if len(took) else []


def domain_thresholds(runs: pl.DataFrame, failure_fraction: float, classes: int) -> dict[str, dict[str, Any]]:
    """Per domain, from the given (development) runs: the failure threshold and the relative-class cut points."""
    out = {}
    for (d,), g in runs.group_by(["domain"], maintain_order=True):
        acc = g["final_test_accuracy"].to_numpy()
        out[d] = {
            "failure_threshold": float(failure_fraction * np.quantile(acc, 0.9)),
            "class_cuts": [float(np.quantile(acc, q)) for q in np.arange(1, classes) / classes],
        }
    return out


def labels(runs: pl.DataFrame, thresholds: dict[str, dict[str, Any]], pooled_fallback: dict[str, Any] | None = None) -> pl.DataFrame:
    """``runs`` with ``failure`` (0/1) and ``relative_class`` (0..k−1) computed with the frozen thresholds."""
    fail, cls = [], []
    for r in runs.iter_rows(named=True):
        t = thresholds.get(r["domain"], pooled_fallback)
        fail.append(int(bool(r["diverged"]) or r["final_test_accuracy"] < t["failure_threshold"]))
        cls.append(int(np.searchsorted(t["class_cuts"], r["final_test_accuracy"], side="right")))
    return runs.with_columns(pl.Series("failure", fail), pl.Series("relative_class", cls))


def _model(target: str, params: dict, seed: int):
    import xgboost as xgb

    kw = dict(
        n_estimators=int(params["n_estimators"]),
        max_depth=int(params["max_depth"]),
        learning_rate=float(params["learning_rate"]),
        subsample=float(params["subsample"]),
        colsample_bytree=float(params["colsample_bytree"]),
        max_bin=int(params["max_bin"]),
        random_state=seed,
        n_jobs=1,
    )
    if target == "final_test_accuracy":
        return xgb.XGBRegressor(**kw)
    return xgb.XGBClassifier(**kw, eval_metric="logloss")


#: What the accuracy model learns, recorded in the manifest: the gain from the run's accuracy now to its final accuracy
#: (the naive guess's residual: trees do not extrapolate a level, and a domain never seen has its own), added back
#: to the accuracy now on prediction. A manifest without it holds models of the final accuracy itself.
ACCURACY_TARGET = "gain over the accuracy now"


def accuracy_columns(epoch: int, feature_set: str, drop: tuple[str, ...] = ()) -> tuple[int | None, int] | None:
    """Where :func:`~prenet.outcome.features.design`'s rows hold the validation and the train accuracy at ``epoch``
    (validation None where the features lack it); None where they hold no train accuracy."""
    names = feature_names(epoch, feature_set, drop)
    val, train = f"val_accuracy_e{epoch}", f"train_accuracy_e{epoch}"
    return (names.index(val) if val in names else None, names.index(train)) if train in names else None


def accuracy_now(X: np.ndarray, columns: tuple[int | None, int]) -> np.ndarray:
    """Each design row's accuracy at its epoch, by :func:`accuracy_at`'s rule: validation where recorded, else train,
    0 where neither is (``columns``: :func:`accuracy_columns`)."""
    val, train = columns
    acc = X[:, train] if val is None else np.where(np.isnan(X[:, val]), X[:, train], X[:, val])
    return np.nan_to_num(acc, nan=0.0)


@dataclass
class Fitted:
    """One fitted model: XGBoost estimator, or a constant when the training labels had one class. ``base``: for the
    accuracy model, the design columns of the accuracy now (:func:`accuracy_columns`) when it learned the gain over it
    (:data:`ACCURACY_TARGET`); None when it learned the final accuracy itself. ``members``: the further estimators of a
    seed bag (:func:`fit_targets` with ``bag`` > 1), whose outputs are averaged with ``model``'s. ``take_off`` and
    ``stack``: for the accuracy model, the take-off model of its epoch and the weights that blend its probability into
    the answer for runs still slow there (:func:`stacked_accuracy`); None: the accuracy model alone."""

    target: str
    model: Any = None
    constant: float | None = None
    base: tuple[int | None, int] | None = None
    members: tuple = ()
    take_off: Fitted | None = None
    stack: tuple[float, float, float] | None = None

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Accuracy (regression, clipped to [0, 1]; stacked with the take-off model's probability on the slow rows
        where ``stack`` is set) or failure probability (binary): the bag's mean."""
        if self.constant is not None:
            return np.full(len(X), self.constant)
        ests = (self.model, *self.members)
        if self.target != "final_test_accuracy":
            return np.mean([m.predict_proba(X)[:, 1] for m in ests], axis=0)
        gain = np.mean([m.predict(X) for m in ests], axis=0)
        acc = np.clip(gain + (accuracy_now(X, self.base) if self.base is not None else 0.0), 0.0, 1.0)
        if self.take_off is None or self.stack is None or self.base is None:
            return acc
        slow = accuracy_now(X, self.base) < SLOW_BELOW
        if slow.any():
            acc[slow] = stacked_accuracy(acc[slow], self.take_off.predict(X[slow]), self.stack)
        return acc


def stacked_accuracy(accuracy: np.ndarray, p_take: np.ndarray, stack: tuple[float, float, float] | list[float]) -> np.ndarray:
    """The answer for runs still slow (:data:`SLOW_BELOW`): ``stack`` = (c0, c1, c2) applied as c0 + c1 × the
    accuracy model's answer + c2 × the take-off model's probability, clipped to [0, 1]. The accuracy model learns
    the mean over every run; the take-off classifier, fitted on the slow runs alone, ranks which of them take off
    (:func:`fit_stack` learns the weights out of fold)."""
    c0, c1, c2 = (float(c) for c in stack)
    return np.clip(c0 + c1 * np.asarray(accuracy, dtype=float) + c2 * np.asarray(p_take, dtype=float), 0.0, 1.0)


#: Fewest slow out-of-fold runs :func:`fit_stack` learns weights from; with fewer the accuracy model answers alone.
STACK_MIN_RUNS = 50


def fit_stack(accuracy: np.ndarray, p_take: np.ndarray, actual: np.ndarray) -> tuple[float, float, float] | None:
    """The least-squares weights of :func:`stacked_accuracy` from out-of-fold answers of slow development runs (the
    accuracy model's, the take-off model's probability) and their ``actual`` final accuracies; None with fewer than
    :data:`STACK_MIN_RUNS` runs."""
    a, p, y = (np.asarray(v, dtype=float) for v in (accuracy, p_take, actual))
    if len(y) < STACK_MIN_RUNS:
        return None
    coef, *_ = np.linalg.lstsq(np.column_stack([np.ones(len(y)), a, p]), y, rcond=None)
    return (round(float(coef[0]), 6), round(float(coef[1]), 6), round(float(coef[2]), 6))


def fit_one(target: str, X: np.ndarray, y: np.ndarray, params: dict, seed: int, base: tuple[int | None, int] | None = None) -> Fitted:
    """One model of ``target`` on ``X``; the accuracy model with ``base`` (:func:`accuracy_columns`) learns the gain
    from the accuracy now (:class:`Fitted`)."""
    if target != "final_test_accuracy" and len(np.unique(y)) == 1:
        return Fitted(target, constant=float(y[0]))
    base = base if target == "final_test_accuracy" else None
    m = _model(target, params, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(X, y - accuracy_now(X, base) if base is not None else y)
    return Fitted(target, m, base=base)


def relative_class(
    accuracy: np.ndarray, cuts: list[float] | list[list[float]], residuals: list[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(class, class probabilities) of predicted final accuracies: the class is where the prediction falls among the
    cut points (one list, or one per run); the probabilities are the shares of ``residuals`` (out-of-fold actual −
    predicted) that would put the run in each class (one-hot on the class without residuals)."""
    acc = np.asarray(accuracy, dtype=float)
    per_run = [cuts] * len(acc) if not cuts or not isinstance(cuts[0], (list, tuple)) else cuts
    cls = np.array([np.searchsorted(c, a, side="right") for c, a in zip(per_run, acc)], dtype=int)
    k = len(per_run[0]) + 1 if len(per_run) else 1
    probs = np.zeros((len(acc), k))
    if residuals is None or not len(residuals):
        probs[np.arange(len(acc)), cls] = 1.0
        return cls, probs
    r = np.asarray(residuals, dtype=float)
    for i, (c, a) in enumerate(zip(per_run, acc)):
        probs[i] = np.bincount(np.searchsorted(c, a + r, side="right"), minlength=k)[:k] / len(r)
    return cls, probs


def fit_targets(
    runs: pl.DataFrame,
    telemetry: pl.DataFrame,
    epoch: int,
    feature_set: str,
    *,
    params: dict,
    seed: int,
    drop: tuple[str, ...] = (),
    targets: tuple[str, ...] = TARGETS,
    bag: int | None = None,
    stack: tuple[float, float, float] | list[float] | None = None,
    take_off_min_runs: int = 20,
) -> dict[str, Fitted]:
    """The models of one (epoch, feature set) on labelled ``runs`` (:func:`labels`). For the telemetry set every run
    is also added once with what a user's call may lack masked, each independently in its share of the copies
    (:data:`~prenet.outcome.features.OPTIONAL_MASKS`), so an unstated domain or schedule, or a table without
    validation, activations or update ratio, is a case the model has seen. ``bag`` (default ``params["bag"]``, else 1):
    that many fits with seeds ``seed``, ``seed + 1``, … (XGBoost's row and column sampling, and which copies are
    masked), averaged (:class:`Fitted` ``members``), for the targets of ``params["bag_targets"]`` (None: all; [] none);
    the others are fitted once. ``stack`` (:func:`fit_stack`'s weights, the trained models' own): the telemetry
    accuracy model, with no group dropped, also gets this epoch's take-off model fitted on the same runs
    (:func:`fit_take_off`, ``params``' bag, ``take_off_min_runs`` as :func:`train_all` was given) and answers the slow
    runs stacked (:func:`stacked_accuracy`), as the trained models answer; a refit without it, or with too few slow
    runs for a take-off model, scores the accuracy model alone."""
    bag = int(params.get("bag", 1)) if bag is None else int(bag)
    X = design(  # once for the bag: only the masked copies differ between its fits
        telemetry, runs["run_id"].to_list(), epoch, feature_set, domains=runs["domain"].to_list(), schedules=runs["schedule"].to_list(), drop=drop
    )
    chosen = params.get("bag_targets")
    if chosen is not None and (isinstance(chosen, str) or not set(chosen) <= set(TARGETS) | {"take_off"}):
        raise PrenetError(f"outcome.predictor.bag_targets={chosen!r}: a list of {', '.join([*TARGETS, 'take_off'])} (or null: all)")
    bagged = tuple(t for t in targets if chosen is None or t in set(chosen))
    fits = [_fit_targets_once(runs, X, (epoch, feature_set, drop, targets), params, seed)]
    fits += [_fit_targets_once(runs, X, (epoch, feature_set, drop, bagged), params, seed + i) for i in range(1, max(bag, 1)) if bagged]
    out = {t: m if m.constant is not None or t not in bagged else replace(m, members=tuple(f[t].model for f in fits[1:])) for t, m in fits[0].items()}
    acc = out.get("final_test_accuracy")
    if stack is not None and acc is not None and acc.constant is None and feature_set == "telemetry" and not drop:
        take = fit_take_off(runs, telemetry, epoch, params=params, seed=seed, min_runs=take_off_min_runs)
        if take is not None:
            out["final_test_accuracy"] = replace(acc, take_off=take[0], stack=tuple(float(c) for c in stack))
    return out


def _fit_targets_once(runs: pl.DataFrame, X: np.ndarray, what: tuple, params: dict, seed: int) -> dict[str, Fitted]:
    """One fit of :func:`fit_targets` with one ``seed`` on the runs' design ``X``; ``what`` = (epoch, feature set,
    dropped groups, targets)."""
    epoch, feature_set, drop, targets = what
    reps = 1
    if feature_set == "telemetry":
        rng = np.random.default_rng(seed)
        B = X
        for g, share in OPTIONAL_MASKS.items():
            B = mask_groups(B, epoch, feature_set, tuple(g.split("|")), drop, rows=rng.random(len(X)) < share)
        X = np.vstack([X, B])
        reps = 2
    out = {}
    base = accuracy_columns(epoch, feature_set, drop)
    for target in targets:
        y = np.tile(runs[target].to_numpy().astype(float if target == "final_test_accuracy" else int), reps)
        out[target] = fit_one(target, X, y, params, seed, base=base)
    return out


def predict_targets(
    models: dict[str, Fitted],
    runs: pl.DataFrame,
    telemetry: pl.DataFrame,
    epoch: int,
    feature_set: str,
    *,
    drop: tuple[str, ...] = (),
    known_domain: bool = True,
    known_schedule: bool = True,
) -> dict[str, np.ndarray]:
    """Predictions of :func:`fit_targets` models for ``runs``: accuracy and failure probability.
    ``known_domain=False`` answers as for a domain the models never saw (domain features masked);
    ``known_schedule=False`` as for a user who did not say the schedule."""
    doms = runs["domain"].to_list() if known_domain else [None] * runs.height
    scheds = runs["schedule"].to_list() if known_schedule else [None] * runs.height
    X = design(telemetry, runs["run_id"].to_list(), epoch, feature_set, domains=doms, schedules=scheds, drop=drop)
    return {t: m.predict(X) for t, m in models.items()}


def cv_residuals(
    runs: pl.DataFrame, telemetry: pl.DataFrame, epoch: int, *, params: dict, seed: int, folds: int = 5, take_off_min_runs: int = 20
) -> tuple[dict[str, list[float]], tuple[float, float, float] | None]:
    """Out-of-fold residuals (actual − predicted accuracy, telemetry model) of the development runs, as answered with
    the domain and schedule stated (``stated``), with neither (``unstated``, the default call), and from a plain
    training log with neither (``plain``: :data:`~prenet.outcome.features.PLAIN_LOG` empty); empty lists when too few
    runs for the folds. Each fold also fits the take-off model (:func:`fit_take_off`, one fit) and answers its slow
    runs; :func:`fit_stack` learns the stack's weights from the unstated answers, and the residuals are those of the
    stacked answer, as :func:`predict` gives it. Returns (residuals by kind, the stack's weights or None)."""
    kinds = ("stated", "unstated", "plain")
    if runs.height < 2 * folds:
        return {k: [] for k in kinds}, None
    idx = np.random.default_rng(seed).permutation(runs.height)
    ids, y = runs["run_id"].to_list(), runs["final_test_accuracy"].to_numpy()
    X = {
        "stated": design(telemetry, ids, epoch, "telemetry", domains=runs["domain"].to_list(), schedules=runs["schedule"].to_list()),
        "unstated": design(telemetry, ids, epoch, "telemetry"),
    }
    X["plain"] = as_plain_log(X["unstated"], epoch)
    base = accuracy_columns(epoch, "telemetry")
    answer = {k: np.empty(runs.height) for k in kinds}
    p_take = {k: np.full(runs.height, np.nan) for k in kinds}  # the take-off model's answer, on the slow runs
    for f in range(folds):
        te = np.sort(idx[f::folds])
        tr = np.setdiff1d(idx, te)
        # one fit a fold, not the bag: the residuals of a single fit are a little wider than the bag's (intervals on
        # the safe side), and the folds are most of train_outcome's time
        m = fit_targets(runs[tr], telemetry, epoch, "telemetry", params=params, seed=seed, targets=("final_test_accuracy",), bag=1)
        take = fit_take_off(runs[tr], telemetry, epoch, params={**params, "bag": 1}, seed=seed, min_runs=take_off_min_runs)
        for k in kinds:
            answer[k][te] = m["final_test_accuracy"].predict(X[k][te])
            slow = te[accuracy_now(X[k][te], base) < SLOW_BELOW]
            if take is not None and len(slow):
                p_take[k][slow] = take[0].predict(X[k][slow])
    seen = np.isfinite(p_take["unstated"])
    stack = fit_stack(answer["unstated"][seen], p_take["unstated"][seen], y[seen])
    res = {}
    for k in kinds:
        seen = np.isfinite(p_take[k])
        if stack is not None:
            answer[k][seen] = stacked_accuracy(answer[k][seen], p_take[k][seen], stack)
        res[k] = [round(float(v), 5) for v in y - answer[k]]
    return res, stack


def residual_bands(predicted: np.ndarray, residuals: np.ndarray, interval: list[float], bands: int) -> dict[str, list]:
    """Residual quantiles by band of predicted accuracy: ``bands`` equal-count bands of the out-of-fold predictions
    (``edges``: their inner boundaries) and each band's ``interval`` quantiles of the residuals (actual − predicted).
    A run still undecided (predicted between failing and succeeding) falls in a band whose residuals are wide, so its
    interval widens. The lowest band, which the corpus calls narrowly (runs predicted at chance stay there in the
    corpus), is never narrower than all runs' quantiles: runs unlike the corpus do take off from there
    (``evaluate_outcome_ooc`` measures it). The other bands keep their own: floored too, the intervals over-covered
    (measured at 80 % nominal: holdout 87 / 86 % at epochs 2 / 5; out of corpus 80/79/86/88 % at epochs 1/2/3/5, and
    88/90/91/91 % on a second draw), where the lowest band alone gives 85 / 83 %, 73/76/81/83 % and 80/88/87/88 %.
    One band (no edges) with fewer than 20 runs a band."""
    pred, res = np.asarray(predicted, dtype=float), np.asarray(residuals, dtype=float)
    overall = [float(np.quantile(res, q)) for q in interval] if len(res) else []
    if bands < 2 or len(res) < 20 * bands:
        return {"edges": [], "quantiles": [overall] if overall else []}
    edges = np.quantile(pred, np.linspace(0, 1, bands + 1)[1:-1])
    idx = np.digitize(pred, edges)
    per = []
    for b in range(bands):
        q = [float(np.quantile(res[idx == b], v)) for v in interval]
        per.append([min(q[0], overall[0]), *q[1:-1], max(q[-1], overall[-1])] if b == 0 else q)
    return {"edges": [float(v) for v in edges], "quantiles": per}


def interval_bounds(accuracy: np.ndarray, quantiles: list[float], bands: dict[str, list] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The interval of predicted final accuracies: the prediction (clipped to [0, 1]) plus the lowest and highest
    residual quantiles — of the prediction's band (:func:`residual_bands`) when ``bands`` are given, else
    ``quantiles`` — clipped to [0, 1]; NaN where a quantile is unknown."""
    acc = np.clip(np.asarray(accuracy, dtype=float), 0, 1)
    if bands and bands.get("quantiles"):
        q = np.asarray(bands["quantiles"], dtype=float)[np.digitize(acc, bands["edges"])]
        return np.clip(acc + q[:, 0], 0, 1), np.clip(acc + q[:, -1], 0, 1)
    if not np.isfinite(quantiles).all():
        return np.full_like(acc, np.nan), np.full_like(acc, np.nan)
    return np.clip(acc + quantiles[0], 0, 1), np.clip(acc + quantiles[-1], 0, 1)


#: The answer's failure probability: this share of the failure classifier's, the rest the accuracy model's (its
#: prediction plus its out-of-fold residuals below the failure threshold). Measured on two out-of-corpus draws of 240
#: runs (epochs 1/2/3): the accuracy model's alone ranks failures better than the classifier at epochs 1-2 (AUC at
#: epoch 2 0.9717 vs 0.9697, 0.9777 vs 0.9729), the half-and-half mixture at least as well as either at every epoch.
FAILURE_CLASSIFIER_SHARE = 0.5


def failure_probability(
    classifier: np.ndarray, accuracy: np.ndarray, residuals: list[float] | np.ndarray | None, threshold: np.ndarray | float
) -> np.ndarray:
    """The answer's failure probability (:data:`FAILURE_CLASSIFIER_SHARE`): the ``classifier``'s mixed with the share
    of the out-of-fold ``residuals`` (actual − predicted accuracy) that would put the predicted ``accuracy`` below the
    failure ``threshold`` (per run, or one); the classifier's alone without residuals."""
    p = np.asarray(classifier, dtype=float)
    if residuals is None or len(residuals) == 0:
        return p
    res = np.asarray(residuals, dtype=float)
    acc = np.asarray(accuracy, dtype=float)[:, None]
    below = ((acc + res[None, :]) < np.broadcast_to(np.asarray(threshold, dtype=float), p.shape)[:, None]).mean(axis=1)
    return FAILURE_CLASSIFIER_SHARE * p + (1.0 - FAILURE_CLASSIFIER_SHARE) * below


def residual_key(epoch: int, stated: bool, plain: bool = False) -> str:
    """The manifest key of the out-of-fold residuals behind an answer at ``epoch``: stated = domain and schedule both
    given (otherwise the wider, unstated residuals answer); ``plain``: a plain training log's (no Recorder probes,
    nothing stated: wider still)."""
    return f"pooled|{epoch}|plain" if plain else f"pooled|{epoch}" + ("" if stated else "|unstated")


def thresholds_for(manifest: dict, domain: str | None) -> dict[str, Any]:
    """The failure threshold and class cuts an answer uses: the domain's when the models know it, else the pooled ones
    (an unstated or unknown domain)."""
    return manifest["thresholds"].get(domain, manifest["pooled_thresholds"]) if domain is not None else manifest["pooled_thresholds"]


def pooled_thresholds(thr: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Thresholds for a domain without its own: the medians over the known domains."""
    return {
        "failure_threshold": float(np.median([t["failure_threshold"] for t in thr.values()])),
        "class_cuts": list(np.median([t["class_cuts"] for t in thr.values()], axis=0)),
    }


def fit_epoch(item: tuple) -> tuple[int, dict, dict[str, list[float]], tuple[float, list[float], tuple | None] | None]:
    """One epoch's share of :func:`train_all` (picklable, for worker processes): ``item`` = (labelled runs,
    telemetry, epoch, params, seed, folds, the take-off model's fewest slow runs). Returns (epoch, {(feature set,
    target): model}, out-of-fold residuals, (the take-off base rate, the take-off group's final-accuracy quantiles,
    the stack's weights or None) or None without a take-off model)."""
    runs, telemetry, e, params, seed, folds, take_off_min_runs = item
    fitted = {(fs, t): m for fs in FEATURE_SETS for t, m in fit_targets(runs, telemetry, e, fs, params=params, seed=seed).items()}
    take_off = fit_take_off(runs, telemetry, e, params=params, seed=seed, min_runs=take_off_min_runs)
    residuals, stack = cv_residuals(runs, telemetry, e, params=params, seed=seed, folds=folds, take_off_min_runs=take_off_min_runs)
    if take_off is None:
        return e, fitted, residuals, None
    fitted[("telemetry", "take_off")] = take_off[0]
    if stack is not None:
        acc = fitted[("telemetry", "final_test_accuracy")]
        fitted[("telemetry", "final_test_accuracy")] = replace(acc, take_off=take_off[0], stack=stack)
    return e, fitted, residuals, (*take_off[1:], stack)


def train_all(
    runs: pl.DataFrame,
    telemetry: pl.DataFrame,
    *,
    epochs: list[int],
    params: dict,
    classes: int,
    failure_fraction: float,
    interval: list[float],
    seed: int,
    folds: int = 10,
    mapper: Callable = map,
    bands: int = 1,
    take_off_min_runs: int = 20,
) -> tuple[dict, dict]:
    """Fit the pooled models (domain as a feature) for every (epoch, feature set, target) on the development
    ``runs``, and the ``folds``-fold out-of-fold residuals behind the intervals (their quantiles overall and in
    ``bands`` bands of predicted accuracy, :func:`residual_bands`), and the take-off model of each epoch where at
    least ``take_off_min_runs`` development runs are slow there (:func:`fit_take_off`), with the weights that stack it
    into the slow runs' accuracy answer (manifest ``take_off.stack``). ``mapper(fn, items)`` runs the
    per-epoch work (the builtin ``map``, or a process pool's). Returns (models keyed ("pooled", epoch, feature set,
    target), manifest)."""
    thr = domain_thresholds(runs, failure_fraction, classes)
    pooled = pooled_thresholds(thr)
    runs = labels(runs, thr)
    models: dict[tuple[str, int, str, str], Fitted] = {}
    quantiles: dict[str, list[float]] = {}
    residuals: dict[str, list[float]] = {}
    banded: dict[str, dict[str, list]] = {}
    y = runs["final_test_accuracy"].to_numpy()
    take_off: dict[str, float] = {}
    took_off: dict[str, list[float]] = {}
    stacks: dict[str, list[float]] = {}
    # the latest epoch first: it has the most features and is the longest fit, so it does not start last (measured:
    # 82.6 -> 80.2 s; epoch 5 alone takes ~60 s of it). Results are keyed by epoch: the same models in any order
    items = [(runs, telemetry, e, params, seed, folds, take_off_min_runs) for e in sorted(epochs, reverse=True)]
    for e, fitted, res_by_kind, base in mapper(fit_epoch, items):
        for (fs, target), m in fitted.items():
            models[("pooled", e, fs, target)] = m
        if base is not None:
            take_off[str(e)], took_off[str(e)], stack = base
            if stack is not None:
                stacks[str(e)] = list(stack)
        for kind, res in res_by_kind.items():
            key = residual_key(e, kind == "stated", plain=kind == "plain")
            residuals[key] = res
            quantiles[key] = [float(np.quantile(res, q)) for q in interval] if res else [float("nan")] * len(interval)
            if res:  # the out-of-fold prediction is the actual accuracy less its residual
                banded[key] = residual_bands(y - np.asarray(res), np.asarray(res), interval, bands)
    manifest = {
        "epochs": epochs,
        "scopes": ["pooled"],
        "feature_sets": list(FEATURE_SETS),
        "targets": list(TARGETS),
        "accuracy_target": ACCURACY_TARGET,
        "classes": classes,
        "thresholds": thr,
        "pooled_thresholds": pooled,
        "failure_fraction": failure_fraction,
        "interval_quantiles": interval,
        "residual_quantiles": quantiles,
        "residual_bands": banded,
        "residuals": residuals,
        "features": {f"{e}|{fs}": feature_names(e, fs) for e in epochs for fs in FEATURE_SETS},
        "domains": sorted(thr),
        "dev_runs": runs.height,
        "cv_folds": folds,
        "take_off": {"slow_below": SLOW_BELOW, "base_rate": take_off, "took_off_final_accuracy": took_off, "stack": stacks},
        # what "final" means: the epochs the fitted runs trained for (the corpus's own length, not the user's)
        "final_epoch": int(np.median(runs["epochs"].to_numpy())) if "epochs" in runs.columns else None,
    }
    return models, manifest


#: The file format of a saved estimator (XGBoost's ``save_model`` picks it by the extension): ``ubj``, binary JSON.
MODEL_FORMAT = "ubj"


def save(models: dict, manifest: dict, folder: str | Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("*__*.json"), *folder.glob("*__*.ubj")]:  # models of an earlier fit (another epoch list…)
        old.unlink()
    consts = {}
    for (scope, e, fs, target), m in models.items():
        name = f"{scope}__e{e}__{fs}__{target}"
        if m.constant is not None:
            consts[name] = m.constant
        else:
            # XGBoost's binary JSON: read 7× faster than its JSON (9 against 62 ms a model here), and an answer reads
            # every model of the folder
            m.model.save_model(folder / f"{name}.{MODEL_FORMAT}")
            for i, member in enumerate(m.members, start=1):  # a seed bag's further fits
                member.save_model(folder / f"{name}__bag{i}.{MODEL_FORMAT}")
    (folder / "manifest.json").write_text(json.dumps({**manifest, "constants": consts}, indent=1, sort_keys=True))
    return folder


def load(folder: str | Path) -> tuple[dict, dict]:
    import xgboost as xgb

    folder = Path(folder)
    if not (folder / "manifest.json").exists():
        from prenet.errors import PrenetError

        raise PrenetError(f"no early-success models in {folder}; run the pipeline first (make run, or dvc repro train_outcome)")
    manifest = json.loads((folder / "manifest.json").read_text())
    for key, stored in manifest.get("features", {}).items():  # the code's features must be those the models learned
        e, fs = key.split("|")
        if stored != feature_names(int(e), fs):
            from prenet.errors import PrenetError

            raise PrenetError(
                f"the early-success models in {folder} were trained on other features than this code computes "
                f"(epoch {e}, {fs}: {len(stored)} stored, {len(feature_names(int(e), fs))} now); retrain: dvc repro train_outcome"
            )
    keys = [
        (scope, e, fs, t) for scope in manifest["scopes"] for e in manifest["epochs"] for fs in manifest["feature_sets"] for t in manifest["targets"]
    ]
    keys += [("pooled", int(e), "telemetry", "take_off") for e in manifest.get("take_off", {}).get("base_rate", {})]  # telemetry only
    models = {}
    for scope, e, fs, target in keys:
        name = f"{scope}__e{e}__{fs}__{target}"
        if name in manifest["constants"]:
            models[(scope, e, fs, target)] = Fitted(target, constant=manifest["constants"][name])
            continue
        ests = []
        fmt = MODEL_FORMAT if (folder / f"{name}.{MODEL_FORMAT}").exists() else "json"  # models saved before 2026-12-06: JSON
        for path in [folder / f"{name}.{fmt}", *sorted(folder.glob(f"{name}__bag*.{fmt}"), key=lambda q: int(q.stem.rsplit("bag", 1)[1]))]:
            # one thread, as fitted: a loaded estimator otherwise predicts on every core, and an answer is a few rows
            # (one row 14 ms a call on this 2-core host, against 0.4 ms on one thread)
            m = xgb.XGBRegressor(n_jobs=1) if target == "final_test_accuracy" else xgb.XGBClassifier(n_jobs=1)
            m.load_model(path)
            ests.append(m)
        gain = target == "final_test_accuracy" and manifest.get("accuracy_target") == ACCURACY_TARGET
        models[(scope, e, fs, target)] = Fitted(target, ests[0], base=accuracy_columns(e, fs) if gain else None, members=tuple(ests[1:]))
    for e, stack in manifest.get("take_off", {}).get("stack", {}).items():  # the accuracy model answers slow runs stacked
        key, take = ("pooled", int(e), "telemetry", "final_test_accuracy"), models.get(("pooled", int(e), "telemetry", "take_off"))
        if take is not None and key in models:
            models[key] = replace(models[key], take_off=take, stack=tuple(float(c) for c in stack))
    return models, manifest
