"""``predict``: a run's final test accuracy, failure probability and relative class from the epochs seen so far.

Decision support only: the answer is advice to look at a run, never a reason to stop it automatically.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from prenet.errors import PrenetError, first_line
from prenet.outcome.features import single_run
from prenet.outcome.models import (
    LATE_BLOOMER,
    SLOW_BELOW,
    accuracy_at,
    failure_probability,
    interval_bounds,
    load,
    may_take_off,
    relative_class,
    residual_key,
    take_off_interval,
    thresholds_for,
)
from prenet.outcome.space import SCHEDULES
from prenet.outcome.telemetry_input import check_telemetry, is_plain_log
from prenet.paths import default_path

CLASS_NAMES = ("bottom third", "middle third", "top third")
#: A run "may still take off" (a late bloomer: issue 29's definition) when its accuracy so far is below ``below`` and
#: the take-off model gives it at least the corpus's base rate of take-off among runs as slow at that epoch (the share
#: of them that ended as successes): runs that looked like it went on to succeed, so the answer is not yet a verdict.
#: Models trained before the take-off model existed flag it when the interval reaches ``reach``.
TAKE_OFF = {"below": SLOW_BELOW, "reach": LATE_BLOOMER["final_at_least"]}


@dataclass
class Outcome:
    """``final_test_accuracy`` (fraction), ``interval`` (low, high: the prediction plus the validation residual
    quantiles of that model; for a run that may take off, the high end that of the mixture the answer describes,
    :func:`~prenet.outcome.models.take_off_interval`), ``failure_probability``, ``relative_class`` (0 = bottom third of its domain …),
    ``epoch`` (the epoch whose model answered), ``scope`` (the domain the answer used, or ``unknown``), ``schedule``
    (the learning-rate schedule stated, or ``None``), ``accuracy_now`` (the last epoch's validation accuracy, else
    its train accuracy), ``take_off_probability`` (for a run still slow: the take-off model's probability that it ends
    as a success; ``None`` otherwise), ``may_take_off`` (:data:`TAKE_OFF`: slow now, but as likely to take off as the
    slow runs of the corpus that did), ``take_off_base_rate`` (that share), ``diverged_at`` (the first epoch whose training
    loss was not finite, recorded empty: such a run has failed by the corpus's definition, failure probability 1;
    ``None`` while the loss is finite), ``final_epoch`` (what "final" means: the epochs the corpus's runs trained for;
    None from models that did not record it), ``interval_level`` (the interval's nominal coverage: 0.8 for the
    residuals' 10th to 90th percentiles), ``plain_log`` (the table had no Recorder probes, only losses, accuracies and
    the optimizer's settings: the interval is then from plain logs' residuals, wider)."""

    final_test_accuracy: float
    interval: tuple[float, float]
    failure_probability: float
    relative_class: int
    relative_class_probabilities: list[float]
    epoch: int
    scope: str
    epochs_seen: int
    schedule: str | None = None
    accuracy_now: float = float("nan")
    may_take_off: bool = False
    take_off_probability: float | None = None
    take_off_base_rate: float | None = None
    diverged_at: int | None = None
    final_epoch: int | None = None
    interval_level: float | None = None
    plain_log: bool = False

    @property
    def relative_class_name(self) -> str:
        return CLASS_NAMES[self.relative_class] if self.relative_class < len(CLASS_NAMES) else str(self.relative_class)

    def to_dict(self) -> dict:
        return {**asdict(self), "relative_class_name": self.relative_class_name}


def predict(
    table: pl.DataFrame,
    *,
    domain: str | None = None,
    schedule: str | None = None,
    models_dir: str | Path | None = None,
    loaded: tuple[dict, dict] | None = None,
    source: str = "predict(table)",
) -> Outcome:
    """Predict from a recorder table (``Recorder.table()``: one row per epoch seen so far). Uses the model of the
    largest trained epoch ≤ the epochs seen. One pooled model answers, with the domain as a feature; a domain
    the corpus never had (or ``None``) is answered as unknown, with a warning when a name was given. ``schedule``
    (one of :data:`prenet.outcome.space.SCHEDULES`) is the run's learning-rate schedule for the epochs to come, when
    the user states it. The table is checked first (:func:`check_telemetry`): a broken rule is one
    :class:`~prenet.outcome.telemetry_input.TelemetryError` naming the column, the row and the rule. ``loaded``: the
    ``(models, manifest)`` of :func:`prenet.outcome.models.load` when the caller answers many runs (read once).
    ``source``: what the table's errors and warnings name (a file)."""
    if not isinstance(table, pl.DataFrame):
        raise PrenetError(f"predict() needs a polars DataFrame (Recorder.table()), got {type(table).__name__}")
    table = check_telemetry(table, source=source)
    if schedule is not None and schedule not in SCHEDULES:
        raise PrenetError(f"predict(schedule={schedule!r}): not a schedule; choose one of {', '.join(SCHEDULES)} or None")
    models, manifest = loaded if loaded is not None else load(default_path("outcome_models", models_dir))
    seen = int(table["epoch"].max())
    usable = [e for e in manifest["epochs"] if e <= seen]
    if not usable:
        raise PrenetError(f"the table holds {seen} epoch(s); the models start at epoch {min(manifest['epochs'])}")
    e = max(usable)
    scope = "pooled"
    known = manifest.get("domains", [])
    if domain is not None and domain not in known:
        import difflib

        lower = {k.lower(): k for k in known}
        close = difflib.get_close_matches(domain.lower(), list(lower), n=1, cutoff=0.75)
        warnings.warn(
            f"domain {domain!r} was not in the corpus (known: {', '.join(known)}"
            + (f"; did you mean {lower[close[0]]!r}?" if close else "")
            + "); the pooled model answers as for an unknown domain",
            stacklevel=2,
        )
    X = single_run(table, e, "telemetry", domain=domain if domain in known else None, schedule=schedule)
    acc = float(models[(scope, e, "telemetry", "final_test_accuracy")].predict(X)[0])  # in [0, 1] (Fitted.predict)
    plain = is_plain_log(table) and residual_key(e, False, plain=True) in manifest.get("residual_quantiles", {})
    rkey = residual_key(e, stated=domain in known and schedule is not None, plain=plain)
    q = manifest["residual_quantiles"].get(rkey, [float("nan"), float("nan")])
    lo, hi = (float(b[0]) for b in interval_bounds(np.array([acc]), q, manifest.get("residual_bands", {}).get(rkey)))
    one, tagged = pl.DataFrame({"run_id": ["run"]}), table.with_columns(pl.lit("run").alias("run_id"))
    now, at_e = (float(accuracy_at(one, tagged, k)[0]) for k in (seen, e))  # the accuracy now, and at the model's epoch
    spec = manifest.get("take_off", {})
    slow_below, base = float(spec.get("slow_below", TAKE_OFF["below"])), spec.get("base_rate", {}).get(str(e))
    model = models.get(("pooled", e, "telemetry", "take_off"))
    p_take = None
    # the take-off model answers the runs it was fitted on (slow at its epoch), where its base rate can be beaten
    if at_e < slow_below and model is not None and model.constant is None and base is not None and 0 < base < 1:
        p_take = float(model.predict(X)[0])
        take_off = bool(may_take_off(now, p_take, base, slow_below))
    else:
        take_off = bool(now < TAKE_OFF["below"] and hi >= TAKE_OFF["reach"])
    if take_off and p_take is not None:  # may still take off: the interval is the mixture the answer describes
        up_level = float(manifest.get("interval_quantiles", [0.1, 0.9])[-1])
        took = spec.get("took_off_final_accuracy", {}).get(str(e), [])
        _, hi_arr = take_off_interval(np.array([lo]), np.array([hi]), np.array([p_take]), np.array([True]), took, up_level)
        hi = float(hi_arr[0])
    thresholds = thresholds_for(manifest, domain if domain in known else None)
    classifier = models[(scope, e, "telemetry", "failure")].predict(X)
    pf = float(failure_probability(classifier, np.array([acc]), manifest.get("residuals", {}).get(rkey), thresholds["failure_threshold"])[0])
    cuts = thresholds["class_cuts"]
    cls, pc = relative_class(np.array([acc]), cuts, manifest.get("residuals", {}).get(rkey))
    # a loss that went non-finite (the Recorder writes it empty) is a failure by the corpus's own label
    # (prenet.outcome.generator.is_failure), not a probability: the trees saw such runs, the definition is exact
    bad = table.filter(pl.col("train_loss").is_null() | ~pl.col("train_loss").cast(pl.Float64).is_finite())["epoch"]
    diverged_at = int(bad.min()) if len(bad) else None
    if diverged_at is not None:
        pf, take_off, p_take = 1.0, False, None
    return Outcome(
        acc,
        (lo, hi),
        pf,
        int(cls[0]),
        [float(v) for v in pc[0]],
        e,
        domain if domain in known else "unknown",
        seen,
        schedule,
        now,
        take_off,
        p_take,
        base if p_take is not None else None,
        diverged_at,
        manifest.get("final_epoch"),
        round(float(q_levels[-1] - q_levels[0]), 6) if (q_levels := manifest.get("interval_quantiles")) else None,
        plain,
    )


def read_telemetry(path: str | Path) -> pl.DataFrame:
    """A run's telemetry table from a CSV or parquet file (``prenet.telemetry.Recorder(...).table()`` written out),
    checked (:func:`check_telemetry`); one-line :class:`PrenetError` when it is missing, unreadable or malformed."""
    return check_telemetry(_read_table(path), source=str(path))


def _read_table(path: str | Path) -> pl.DataFrame:
    """The table of a CSV or parquet file, unchecked; one-line :class:`PrenetError` when it is missing or unreadable."""
    src = Path(path)
    if src.is_dir():
        raise PrenetError(f"telemetry {src} is a folder; give the CSV or parquet file a Recorder's table was written to")
    if not src.is_file():
        raise PrenetError(f"telemetry file {src} does not exist (write one with prenet.telemetry.Recorder(...).table())")
    try:
        table = pl.read_parquet(src) if src.suffix == ".parquet" else pl.read_csv(src)
    except Exception as e:  # noqa: BLE001 — any reader failure is the file's fault
        first = first_line(e)  # polars appends hints on more lines
        raise PrenetError(f"{src} is not a readable CSV or parquet file: {first}") from e
    return table


def predict_file(
    path: str | Path, *, domain: str | None = None, schedule: str | None = None, models_dir: str | Path | None = None
) -> tuple[Outcome, list[str]]:
    """:func:`predict` on a telemetry file; also returns the warnings it raised (unknown domain, few epochs…) as
    text, so a caller can show them beside the answer."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = predict(_read_table(path), domain=domain, schedule=schedule, models_dir=models_dir, source=str(path))
    return out, [str(w.message) for w in caught]


def render_outcome(out: Outcome) -> str:
    """The answer as the CLI prints it (several lines, ending with the advice-only note)."""
    lo, hi = out.interval
    return "\n".join(
        [
            f"after {out.epochs_seen} epoch(s) — model of epoch {out.epoch}, domain {out.scope}, schedule {out.schedule or 'not stated'}:",
            f"  final test accuracy   {out.final_test_accuracy:.3f}   ("
            + (f"{100 * out.interval_level:.0f} % " if out.interval_level else "")
            + f"interval {lo:.3f} – {hi:.3f}"
            + (f"; after {out.final_epoch} epochs, the length of the corpus's runs, not of yours" if out.final_epoch else "")
            + ")",
            *(["  answered from         a plain training log (no Recorder probes): less to go on, so a wider interval"] if out.plain_log else []),
            f"  failure probability   {out.failure_probability:.3f}"
            + (
                f"   (the training loss was not finite from epoch {out.diverged_at}, recorded empty: the run has diverged, a failure "
                "by the corpus's definition; lower the learning rate or the initialization scale)"
                if out.diverged_at is not None
                else ""
            ),
            f"  relative class        {out.relative_class_name} of its domain",
            *(
                [
                    f"  may still take off    accuracy {out.accuracy_now:.2f} now, but "
                    + (
                        f"{100 * out.take_off_probability:.0f} % of runs like it went on to succeed (of all runs this slow: "
                        f"{100 * out.take_off_base_rate:.0f} %)"
                        if out.take_off_probability is not None and out.take_off_base_rate is not None
                        else f"runs like it ended as high as {hi:.2f}"
                    )
                    + f": not a verdict yet, look again after epoch {out.epochs_seen + 2}"
                ]
                if out.may_take_off
                else []
            ),
            *(
                [
                    f"  take-off chance       {100 * out.take_off_probability:.0f} % for this run, against {100 * out.take_off_base_rate:.0f} % "
                    f"of the corpus's runs this slow at epoch {out.epoch} (accuracy {out.accuracy_now:.2f} now)"
                ]
                if not out.may_take_off and out.take_off_probability is not None and out.take_off_base_rate is not None
                else []
            ),
            "This is advice to look at the run, not an automatic stop: prenet never stops a run by itself.",
        ]
    )
