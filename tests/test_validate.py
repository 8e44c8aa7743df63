"""The validate stage is a gate: a corrupted table fails it with a message a user can act on, and nothing
downstream runs on it."""

from pathlib import Path

import polars as pl
import pytest

from pipeline.validate import validate
from prenet.data.io import validate as validate_frame
from prenet.data.schemas import LayerFeatures
from prenet.errors import DataValidationError


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to validate (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("validate")


@pytest.fixture
def features_ready(tiny_run, tmp_path):
    """A fresh copy of the tiny run's raw and feature tables, and a config pointing at it."""
    root, cfg, _ = tiny_run
    from omegaconf import OmegaConf

    c = OmegaConf.create(OmegaConf.to_container(cfg))
    for key in ("raw_timings", "features", "validated", "validation_report"):
        src = Path(cfg.paths[key])
        dst = tmp_path / src.name if key != "validation_report" else tmp_path / "report.json"
        if key in ("raw_timings", "features"):
            dst.write_bytes(src.read_bytes())
        c.paths[key] = str(dst)
    c.paths.validated = str(tmp_path / "validated.parquet")
    return c


def _corrupt(cfg, fn):
    p = Path(cfg.paths.features)
    fn(pl.read_parquet(p)).write_parquet(p)


def test_clean_tables_pass(features_ready):
    validate(features_ready)
    assert Path(features_ready.paths.validated).exists()


@pytest.mark.parametrize(
    "case,corrupt,expect",
    [
        (
            "negative time",
            lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(-1.0).otherwise(pl.col("time_ms")).alias("time_ms")),
            ["column 'time_ms'", "greater_than(0)", '"row": 3'],
        ),
        (
            "NaN time",
            lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(float("nan")).otherwise(pl.col("time_ms")).alias("time_ms")),
            ["column 'time_ms'", "is_finite", '"row": 2'],
        ),
        ("wrong dtype", lambda d: d.with_columns(pl.col("flops").cast(pl.String)), ["column 'flops'", "wrong dtype", "String"]),
        ("missing column", lambda d: d.drop("hw_peak_tflops"), ["column 'hw_peak_tflops'", "missing", "column_in_dataframe"]),
        ("duplicate key", lambda d: pl.concat([d, d.head(2)]), ["'sample_id'", "uniqueness", '"row": 0']),
    ],
)
def test_corrupted_features_fail_with_file_column_rule_and_rows(features_ready, case, corrupt, expect):
    _corrupt(features_ready, corrupt)
    with pytest.raises(DataValidationError) as e:
        validate(features_ready)
    msg = str(e.value)
    assert features_ready.paths.features in msg, case
    for part in expect:
        assert part in msg, f"{case}: {part!r} not in {msg}"
    assert not Path(features_ready.paths.validated).exists(), "nothing downstream may be written"


def test_all_failures_are_collected_at_once(features_ready):
    _corrupt(features_ready, lambda d: d.drop("ct_ms").with_columns(pl.lit(-1.0).alias("time_ms")))
    with pytest.raises(DataValidationError) as e:
        validate(features_ready)
    assert "ct_ms" in str(e.value) and "time_ms" in str(e.value)


def test_split_refuses_an_unvalidated_table(features_ready):
    """Downstream stages re-validate what they read: a corrupted table never reaches training."""
    df = pl.read_parquet(features_ready.paths.features).with_columns(pl.lit(0.0).alias("time_ms"))
    with pytest.raises(DataValidationError):
        validate_frame(df, LayerFeatures, source="x")


def test_validate_cli_exits_nonzero_without_traceback(features_ready, tmp_path):
    import subprocess
    import sys

    from omegaconf import OmegaConf

    _corrupt(features_ready, lambda d: d.drop("hw_peak_tflops"))
    params = tmp_path / "params.yaml"
    OmegaConf.save(features_ready, params)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.run", "validate", "--params", str(params)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 2
    assert "hw_peak_tflops" in proc.stderr and "Traceback" not in proc.stderr


def test_a_truncated_table_is_one_line_naming_it(tmp_path):
    from prenet.data.io import read_table
    from prenet.errors import PrenetError

    good = tmp_path / "t.parquet"
    pl.DataFrame({"a": list(range(100))}).write_parquet(good)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:200])
    with pytest.raises(PrenetError) as e:
        read_table(cut)
    assert "\n" not in str(e.value) and str(cut) in str(e.value) and "not a readable parquet table" in str(e.value)
