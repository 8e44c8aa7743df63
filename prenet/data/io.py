"""Reading, validating and atomically writing the tables that cross stage boundaries."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandera.polars as pa
import polars as pl
from pandera.errors import SchemaError, SchemaErrors

from prenet.errors import DataValidationError, PrenetError, first_line

MAX_EXAMPLES = 3


def _describe_failures(df: pl.DataFrame, failures: pl.DataFrame, schema_name: str, key: tuple[str, ...]) -> list[str]:
    lines: list[str] = []
    groups = failures.group_by(["schema_context", "column", "check"], maintain_order=True).agg(
        pl.col("failure_case"), pl.col("index")
    )
    for g in groups.iter_rows(named=True):
        ctx, col, check = g["schema_context"], g["column"], g["check"]
        cases = [c for c in g["failure_case"] if c is not None]
        idx = sorted({int(i) for i in g["index"] if i is not None})
        if check == "column_in_dataframe":
            for missing in cases:
                lines.append(f"column '{missing}': missing (rule column_in_dataframe); the schema requires it")
            continue
        if check.startswith("dtype("):
            lines.append(f"column '{col}': wrong dtype (rule {check}): found {', '.join(map(str, cases))}")
            continue
        if check == "column_in_schema":
            lines.append(f"column '{', '.join(map(str, cases))}': not in schema {schema_name} (rule column_in_schema, strict)")
            continue
        label = "duplicate key" if "uniqueness" in check else "rule"
        if ctx == "DataFrameSchema":
            where = "key column(s) " + ", ".join(f"'{k}'" for k in key) if "uniqueness" in check else f"table {col}"
        else:
            where = f"column '{col}'"
        n = len(idx) if idx else len(cases)
        examples = ""
        if idx:
            show = [c for c in (*key, col) if c in df.columns]
            rows = df.with_row_index("row").filter(pl.col("row").is_in(idx[:MAX_EXAMPLES])).select(["row", *dict.fromkeys(show)])
            examples = "; e.g. " + "; ".join(json.dumps(r, default=str) for r in rows.to_dicts())
        elif cases:
            examples = f"; e.g. values {cases[:MAX_EXAMPLES]}"
        lines.append(f"{where}: {label} {check} failed on {n} row(s){examples}")
    return lines


def validate(df: pl.DataFrame, schema: type[pa.DataFrameModel], *, source: str | Path = "<frame>") -> pl.DataFrame:
    """Validate ``df`` against ``schema`` collecting every failure (lazy).

    Raises :class:`DataValidationError` whose message names the file, each failing column and rule, and
    example rows (row numbers are 0-based positions in the file).
    """
    name = schema.Config.name if hasattr(schema.Config, "name") else schema.__name__
    from prenet.data.schemas import KEYS

    key = KEYS.get(name, ())
    try:
        return schema.validate(df, lazy=True)
    except SchemaErrors as e:
        lines = _describe_failures(df, e.failure_cases, name, key)
    except SchemaError as e:  # non-lazy path (should not happen), keep the message
        lines = [str(e)]
    msg = (
        f"{source}: {len(lines)} problem(s) against schema {name}:\n"
        + "\n".join(f"  - {line}" for line in lines)
        + "\nNothing downstream was run on this table. Fix the file or the stage that wrote it, then run again."
    )
    raise DataValidationError(msg)


def read_table(path: str | Path, schema: type[pa.DataFrameModel] | None = None) -> pl.DataFrame:
    """Read a parquet (or CSV) table and, when ``schema`` is given, validate it."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist; run the stage that produces it (see dvc.yaml) first")
    try:
        df = pl.read_csv(p) if p.suffix == ".csv" else pl.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file is the file's fault, said in one line
        raise PrenetError(
            f"{p} is not a readable {'CSV' if p.suffix == '.csv' else 'parquet'} table ({type(e).__name__}: {first_line(e)}); "
            "rerun the stage that produces it (see dvc.yaml), or `dvc checkout` it"
        ) from e
    return validate(df, schema, source=p) if schema is not None else df


def _atomic_target(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600; the finished file gets the usual permissions
    return Path(tmp)


def write_table(df: pl.DataFrame, path: str | Path, schema: type[pa.DataFrameModel] | None = None) -> Path:
    """Validate (when ``schema`` is given) and write ``df`` atomically: a temporary file, then a rename."""
    p = Path(path)
    if schema is not None:
        df = validate(df, schema, source=f"{p} (about to be written)")
    tmp = _atomic_target(p)
    try:
        if p.suffix == ".csv":
            df.write_csv(tmp)
        else:
            df.write_parquet(tmp)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def write_json(obj: Any, path: str | Path) -> Path:
    """Write JSON atomically (sorted keys, 2-space indent)."""
    p = Path(path)
    tmp = _atomic_target(p)
    try:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def write_text(text: str, path: str | Path) -> Path:
    """Write text atomically."""
    p = Path(path)
    tmp = _atomic_target(p)
    try:
        tmp.write_text(text)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p
