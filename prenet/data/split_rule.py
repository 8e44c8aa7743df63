"""The frozen holdout: membership is a pure function of a stable hash of each sample's identity key.

``bucket(key) = int(sha256(salt + "|" + key)[:16], 16) / 2**64`` ∈ [0, 1). A sample is in the holdout when
``bucket < holdout_fraction``, in validation when ``holdout_fraction ≤ bucket < holdout_fraction +
val_fraction``, else in train. Row order, RNG state and the other rows play no part, so appending data never
moves an existing sample. The salt and fractions are frozen in ``conf/split/frozen20.yaml``: changing either
re-draws the holdout (that is a new holdout, not the frozen one).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import polars as pl

from prenet.errors import HoldoutLeakError, PrenetError


@dataclass(frozen=True)
class SplitRule:
    """``key_column``: the column holding each sample's group identity (samples sharing it go together)."""

    key_column: str = "shape_id"
    salt: str = "prenet-holdout-v1"
    holdout_fraction: float = 0.2
    val_fraction: float = 0.16

    def __post_init__(self) -> None:
        if not (0 < self.holdout_fraction < 1 and 0 <= self.val_fraction < 1 - self.holdout_fraction):
            raise PrenetError(
                f"split fractions holdout={self.holdout_fraction}, val={self.val_fraction} must be in (0, 1) and sum below 1 "
                "(split.holdout_fraction, split.val_fraction)"
            )


def bucket(key: str, salt: str) -> float:
    """Stable position of ``key`` in [0, 1)."""
    h = hashlib.sha256(f"{salt}|{key}".encode()).hexdigest()[:16]
    return int(h, 16) / 2**64


def assign(key: str, rule: SplitRule) -> str:
    """``train``, ``val`` or ``holdout`` for one key."""
    b = bucket(key, rule.salt)
    if b < rule.holdout_fraction:
        return "holdout"
    if b < rule.holdout_fraction + rule.val_fraction:
        return "val"
    return "train"


def assign_frame(df: pl.DataFrame, rule: SplitRule) -> pl.DataFrame:
    """``df`` with a ``split`` column computed from ``rule.key_column``."""
    if rule.key_column not in df.columns:
        raise KeyError(f"split key column {rule.key_column!r} is not in the table (columns: {', '.join(df.columns)})")
    keys = df.get_column(rule.key_column).unique().to_list()
    mapping = pl.DataFrame({rule.key_column: keys, "split": [assign(str(k), rule) for k in keys]})
    return df.join(mapping, on=rule.key_column, how="left", maintain_order="left")


def assert_no_holdout(df: pl.DataFrame, rule: SplitRule, *, where: str) -> None:
    """Guard for training and model selection: raise :class:`HoldoutLeakError` if any row of ``df`` belongs
    to the frozen holdout (recomputed from its key, whatever its ``split`` column claims)."""
    if df.height == 0:
        return
    keys = df.get_column(rule.key_column).unique().to_list()
    leaked = [k for k in keys if assign(str(k), rule) == "holdout"]
    if leaked:
        raise HoldoutLeakError(
            f"{where}: {len(leaked)} holdout key(s) reached a stage that must never read the frozen holdout "
            f"(e.g. {rule.key_column}={leaked[0]!r}). Read the dev table written by the split stage, not the full table."
        )
