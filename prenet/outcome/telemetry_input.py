"""A user's telemetry table checked before any prediction: one line per problem, naming the column, the row and the
rule, raised as :class:`TelemetryError` (exit 2 from the CLI).

The rules are those of :class:`prenet.data.schemas.Telemetry` (types, nullability, bounds, one row per epoch), read
from the schema itself, plus what the schema cannot say: epochs run 1, 2, …, k without a gap, and no column is
unknown. A non-finite number (a diverged run's NaN or inf loss, as training loops log it) in a column that may be
empty is read as empty, as the recorder writes it, with a warning naming the first; in a column that needs a value in
every row it is refused. Rows are numbered from 1, header
excluded (the CSV's line number minus one)."""

from __future__ import annotations

import warnings
from typing import Any

import polars as pl

from prenet.errors import PrenetError

#: Columns a prediction cannot do without; the other telemetry columns may be absent (predicted from what is there).
REQUIRED = ("epoch", "train_loss", "train_accuracy")
#: The columns of a plain training log (a Keras or Lightning history, written without the Recorder): what
#: ``evaluate_outcome_ooc`` answers the out-of-corpus runs from once more (``plain_log_r2``).
PLAIN_LOG_COLUMNS = ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy")
#: Columns a recorder given the optimizer fills (:class:`prenet.telemetry.Recorder`).
OPTIMIZER_COLUMNS = ("lr", "momentum", "adaptive")
#: Columns that may come along and are ignored (a corpus table's run key).
IGNORED = ("run_id",)


class TelemetryError(PrenetError):
    """The telemetry table breaks a rule: which column, which row, which rule."""


def _rules() -> dict[str, tuple[pl.DataType, bool, list[tuple[str, object]]]]:
    from prenet.data.schemas import Telemetry

    out = {}
    for name, col in Telemetry.to_schema().columns.items():
        bounds = []
        for ch in col.checks:
            if ch.name == "greater_than_or_equal_to":
                bounds.append((">=", float(ch.statistics["min_value"])))
            elif ch.name == "less_than_or_equal_to":
                bounds.append(("<=", float(ch.statistics["max_value"])))
            elif ch.name == "greater_than":
                bounds.append((">", float(ch.statistics["min_value"])))
            elif ch.name == "less_than":
                bounds.append(("<", float(ch.statistics["max_value"])))
            elif ch.name == "isin":
                bounds.append(("in", [float(v) for v in ch.statistics["allowed_values"]]))
        out[name] = (pl.Int64 if "Int" in str(col.dtype) else pl.Float64, bool(col.nullable), bounds)
    return out


#: Other tools' names for the telemetry's columns (Keras's ``History``, Lightning's and timm's logs): an unknown
#: column of one of these names is told the column it stands for (the closest spelling would say ``loss`` → ``val_loss``).
OTHER_NAMES: dict[str, str] = {
    "loss": "train_loss",
    "accuracy": "train_accuracy",
    "acc": "train_accuracy",
    "train_acc": "train_accuracy",
    "val_acc": "val_accuracy",
    "valid_loss": "val_loss",
    "valid_accuracy": "val_accuracy",
    "eval_loss": "val_loss",
    "eval_accuracy": "val_accuracy",
}


def _unknown_column_rule(name: str, width: int, known: list[str]) -> str:
    """The rule an unknown column breaks, with the likely fix: another separator (a one-column table whose name holds
    ``;`` or a tab), the column another tool's name stands for (:data:`OTHER_NAMES`), or the known column its name is
    closest to."""
    import difflib

    if width == 1 and any(sep in name for sep in (";", "\t", "|")):
        return "the header reads as one column: the file is not comma-separated; write it as CSV (commas) or parquet"
    if OTHER_NAMES.get(name.lower()) in known:
        return f"unknown column; another tool's name for {OTHER_NAMES[name.lower()]!r}? rename it to that (known: {', '.join(known)})"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown column; {hint}rename or drop it (known: {', '.join(known)})"


def _bound_hint(column: str, values: pl.Series, op: str, bound: object) -> str:
    """How to fix a value out of its bounds where the cause is common: accuracies in percent, epochs counted from 0."""
    if op == "<=" and bound == 1 and "accuracy" in column and values.max() <= 100:
        return " (accuracies are fractions: divide percentages by 100)"
    if column == "epoch" and op == ">=" and values.min() == 0:
        return " (number the epochs from 1: the row of the first finished epoch is epoch 1)"
    return ""


def with_absent_columns(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """(``table`` with every telemetry column it lacks (:class:`~prenet.data.schemas.Telemetry`) added as nulls of that
    column's dtype, their names in schema order): a table from an older recorder, or a user's without some
    measurements. A column the schema wants filled in every row but that has no value in any row counts as absent too
    (such a table, once filled, is checked again by :func:`~prenet.outcome.predict.predict`); a column that may be
    empty stays (a recorder leaves ``saturated_frac`` empty for a model without tanh or sigmoid units)."""
    rules = _rules()
    empty = [c for c in table.columns if c in rules and not rules[c][1] and table.height and table[c].null_count() == table.height]
    absent = [c for c in rules if c not in table.columns or c in empty]
    table = table.drop([c for c in absent if c in table.columns])
    return (table.with_columns([pl.lit(None, dtype=rules[c][0]).alias(c) for c in absent]) if absent else table), absent


def _fail(source: str, col: str, row: int | None, rule: str) -> TelemetryError:
    where = f"column {col!r}" + (f", row {row}" if row is not None else "")
    return TelemetryError(f"{source}: {where}: {rule}")


def check_telemetry(table: pl.DataFrame, *, source: str = "telemetry") -> pl.DataFrame:
    """``table`` cast to the telemetry schema (absent optional columns added as empty, with a warning naming them),
    or :class:`TelemetryError` on the first broken rule."""
    rules = _rules()
    if table.height == 0:
        raise TelemetryError(f"{source}: the table has no rows; record at least one epoch (Recorder.end_epoch)")
    unknown = [c for c in table.columns if c not in rules and c not in IGNORED]
    if unknown:
        raise _fail(source, unknown[0], None, _unknown_column_rule(unknown[0], table.width, list(rules)))
    for c in REQUIRED:
        if c not in table.columns:
            raise _fail(source, c, None, "required column is missing (one row per epoch with epoch, train_loss, train_accuracy)")
    table, missing = with_absent_columns(table)
    table = _blank_non_finite(table, rules, missing, source)
    if missing:
        remedy = " (Recorder(model, optimizer=opt) records the optimizer's)" if set(missing) & set(OPTIMIZER_COLUMNS) else ""
        warnings.warn(f"{source} has no {', '.join(missing)}; the prediction uses what is there{remedy}", stacklevel=3)
    if _any_violation(table, rules, missing):
        _raise_first_violation(table, rules, missing, source)
    cast = {c: pl.col(c) if c in missing else pl.col(c).cast(dtype, strict=False) for c, (dtype, _, _) in rules.items()}
    out = table.select([e.alias(c) for c, e in cast.items()])
    ep = out["epoch"].to_list()
    seen: dict[int, int] = {}
    for i, e in enumerate(ep):
        if e in seen:
            raise _fail(source, "epoch", i + 1, f"epoch {e} repeats row {seen[e] + 1}; one row per epoch")
        seen[e] = i
    expected = set(range(1, max(ep) + 1))
    if set(ep) != expected:
        gap = min(expected - set(ep))
        raise _fail(source, "epoch", None, f"epoch {gap} is missing; epochs must run 1, 2, …, {max(ep)} without a gap")
    return out.sort("epoch")


def _blank_non_finite(table: pl.DataFrame, rules: dict, missing: list[str], source: str) -> pl.DataFrame:
    """``table`` with each non-finite value (NaN, ±inf) of a number column that may be empty read as empty, as the
    recorder writes a value that was not finite (the predictor reads an empty loss as a diverged run); a warning names
    the first. A column that needs a value in every row (``train_accuracy``) keeps its non-finite values, which the
    rules then refuse."""
    cols = [c for c, (dtype, nullable, _) in rules.items() if dtype == pl.Float64 and nullable and c not in missing]
    try:
        bad = {c: m for c in cols if (m := table[c].cast(pl.Float64, strict=False)).is_nan().any() or m.is_infinite().any()}
    except pl.exceptions.PolarsError:  # a column polars cannot cast at all: the rule search names it
        return table
    if not bad:
        return table
    c, m = next(iter(bad.items()))
    i = int((m.is_nan() | m.is_infinite()).arg_true()[0])
    n = sum(int((v.is_nan() | v.is_infinite()).sum()) for v in bad.values())
    warnings.warn(
        f"{source}: column {c!r}, row {i + 1}: {m[i]} is not finite; read as empty, as the recorder writes it"
        + (" (a diverged run)" if c.endswith("_loss") else "")
        + (f", and {n - 1} more such value(s)" if n > 1 else ""),
        stacklevel=4,
    )
    return table.with_columns([pl.when(v.is_nan() | v.is_infinite()).then(None).otherwise(pl.col(c)).alias(c) for c, v in bad.items()])


def _bound_ok(cast: pl.Expr | pl.Series, op: str, v: Any) -> Any:
    """Whether each value keeps the bound ``op`` ``v`` (null where the value is)."""
    return cast.is_in(v) if op == "in" else {">=": cast >= v, "<=": cast <= v, ">": cast > v, "<": cast < v}[op]


def _checks(dtype: Any, nullable: bool, bounds: list) -> list[tuple[str, Any, Any, Any]]:
    """A column's rules, in the order a broken one is reported: (kind, op, bound, broken) with ``broken(raw, cast)``
    the rows that break it, on polars expressions (the one-pass check) or series (the row search) alike."""
    out: list[tuple[str, Any, Any, Any]] = [("type", None, None, lambda raw, cast: cast.is_null() & raw.is_not_null())]
    if dtype == pl.Float64 and not nullable:  # (a column that may be empty reads a non-finite value as empty instead)
        out.append(("finite", None, None, lambda raw, cast: (cast.is_nan() | cast.is_infinite()).fill_null(False)))
    if not nullable:
        out.append(("empty", None, None, lambda raw, cast: cast.is_null()))
    out += [("bound", op, v, lambda raw, cast, op=op, v=v: (~_bound_ok(cast, op, v)).fill_null(False)) for op, v in bounds]
    return out


def _any_violation(table: pl.DataFrame, rules: dict, missing: list[str]) -> bool:
    """Whether any present column breaks a rule of :func:`check_telemetry`, all columns in one pass (the rule-by-rule
    search for the first broken one, :func:`_raise_first_violation`, costs ~30 ms a table: 960 of them in the
    out-of-corpus check)."""
    flags = [
        broken(pl.col(c), pl.col(c).cast(dtype, strict=False)).any()
        for c, (dtype, nullable, bounds) in rules.items()
        if c not in missing
        for _, _, _, broken in _checks(dtype, nullable, bounds)
    ]
    try:
        return bool(flags) and any(table.select(pl.any_horizontal(flags)).row(0))
    except pl.exceptions.PolarsError:  # a column polars cannot cast at all: the column-by-column search names it
        return True


def _raise_first_violation(table: pl.DataFrame, rules: dict, missing: list[str], source: str) -> None:
    """:class:`TelemetryError` naming the first broken rule (column by column, row by row), for a table
    :func:`_any_violation` found broken."""
    for c, (dtype, nullable, bounds) in rules.items():
        if c in missing:  # absent: left empty, not checked
            continue
        raw = table[c]
        cast = raw.cast(dtype, strict=False)
        for kind, op, v, broken in _checks(dtype, nullable, bounds):
            rows = broken(raw, cast).arg_true()
            if not len(rows):
                continue
            i = int(rows[0])
            if kind == "type":
                raise _fail(source, c, i + 1, f"{raw[i]!r} is not {'an integer' if dtype == pl.Int64 else 'a number'}")
            if kind == "finite":
                raise _fail(source, c, i + 1, f"{cast[i]} is not finite; this column needs a finite value in every row")
            if kind == "empty":
                raise _fail(source, c, i + 1, "is empty; this column needs a value in every row")
            rule = f"{c} in {{{', '.join(f'{x:g}' for x in v)}}}" if op == "in" else f"{c} {op} {v:g}"
            raise _fail(source, c, i + 1, f"{cast[i]:g} breaks the rule {rule}{_bound_hint(c, cast, op, v)}")
    raise AssertionError("a broken rule was found in one pass but not column by column")


def is_plain_log(table: pl.DataFrame) -> bool:
    """Whether a checked table (:func:`check_telemetry`) is a plain training log: no value in any column beyond
    :data:`PLAIN_LOG_COLUMNS` and the optimizer's (no Recorder probe: gradients, weights, activations, quarters)."""
    probes = [c for c in table.columns if c not in (*PLAIN_LOG_COLUMNS, *OPTIMIZER_COLUMNS, *IGNORED)]
    return all(table[c].null_count() == table.height for c in probes)
