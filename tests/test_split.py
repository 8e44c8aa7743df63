"""The frozen 20% holdout: stable under appends, 20% ± 2%, and guarded."""

import polars as pl
import pytest

from prenet.data.split_rule import SplitRule, assert_no_holdout, assign, assign_frame, bucket
from prenet.errors import HoldoutLeakError

RULE = SplitRule(key_column="shape_id", salt="prenet-holdout-v1", holdout_fraction=0.2, val_fraction=0.16)


def _frame(start: int, n: int) -> pl.DataFrame:
    return pl.DataFrame({"shape_id": [f"shape-{i}" for i in range(start, start + n)], "x": list(range(n))})


def test_bucket_is_a_pure_function_of_key_and_salt():
    assert bucket("abc", "s") == bucket("abc", "s")
    assert bucket("abc", "s") != bucket("abc", "t")
    assert 0 <= bucket("abc", "s") < 1


def test_appending_1000_rows_moves_no_existing_sample():
    base = assign_frame(_frame(0, 5000), RULE)
    grown = assign_frame(pl.concat([_frame(5000, 1000), _frame(0, 5000).sample(fraction=1.0, shuffle=True, seed=3)]), RULE)
    merged = base.join(grown, on="shape_id", suffix="_after")
    assert merged.height == 5000
    assert (merged["split"] == merged["split_after"]).all()


def test_holdout_share_is_20_percent_within_2_points():
    df = assign_frame(_frame(0, 6000), RULE)
    share = (df["split"] == "holdout").mean()
    assert 0.18 <= share <= 0.22
    val = (df["split"] == "val").mean()
    assert 0.14 <= val <= 0.18


def test_rows_sharing_a_key_go_together():
    df = assign_frame(pl.DataFrame({"shape_id": ["a", "b", "a", "b", "a"], "x": range(5)}), RULE)
    assert df.group_by("shape_id").agg(pl.col("split").n_unique()).get_column("split").max() == 1


def test_guard_fires_on_a_holdout_row_whatever_its_split_column_says():
    df = assign_frame(_frame(0, 200), RULE)
    dev = df.filter(pl.col("split") != "holdout")
    assert_no_holdout(dev, RULE, where="test")  # clean: no error
    leaked = pl.concat([dev, df.filter(pl.col("split") == "holdout").head(1).with_columns(pl.lit("train").alias("split"))])
    with pytest.raises(HoldoutLeakError, match="holdout"):
        assert_no_holdout(leaked, RULE, where="train")


def test_assign_agrees_with_frame():
    df = assign_frame(_frame(0, 50), RULE)
    for k, s in zip(df["shape_id"], df["split"]):
        assert assign(k, RULE) == s


def test_bad_fractions_are_rejected():
    from prenet.errors import PrenetError

    with pytest.raises(PrenetError, match=r"must be in \(0, 1\) and sum below 1 \(split.holdout_fraction, split.val_fraction\)"):
        SplitRule(holdout_fraction=0.9, val_fraction=0.2)
