"""Per-op step-time models on synthetic timings with a known law."""

import numpy as np
import polars as pl
import pytest

from prenet.hardware.spec import HardwareSpec
from prenet.layers import ALL_SHAPE_COLUMNS
from prenet.recipe.features import featurize
from prenet.recipe.model import StepTimeModel, fit_step_time_model, select_step_time_model

HW = HardwareSpec("cpu-test", "cpu", 0.1, 20.0, 1, 2500.0)


def _rows(sizes, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for b, i, o in sizes:
        rows.append(
            {
                "source": "local",
                "hardware_id": "cpu-test",
                "threads": 1,
                "dtype": "float32",
                "op": "linear",
                "direction": "forward",
                "optimizer": "none",
                "activation": "none",
                **{c: None for c in ALL_SHAPE_COLUMNS},
                "batch": b,
                "in_features": i,
                "out_features": o,
            }
        )
    df = featurize(pl.DataFrame(rows, schema_overrides={c: pl.Int64 for c in ALL_SHAPE_COLUMNS}), {"cpu-test": HW})
    # the law: 2 × roofline + 0.01 ms, with 3 % noise
    t = (2 * df["roofline_ms"].to_numpy() + 0.01) * rng.lognormal(0, 0.03, df.height)
    return df.with_columns(pl.Series("time_ms", t))


def _sizes(rng, n, hi):
    return [tuple(int(v) for v in rng.integers(8, hi, 3)) for _ in range(n)]


def test_extrapolation_beyond_the_benchmarked_range():
    rng = np.random.default_rng(1)
    train = _rows(_sizes(rng, 400, 256))
    big = _rows([(1024, 2048, 2048), (512, 4096, 1024)])
    params = {"n_estimators": 200, "early_stopping_rounds": None}
    plain, _ = fit_step_time_model(train, train.head(0), predictor="xgboost", params=params, min_rows=10, progress=False)
    extra, _ = fit_step_time_model(train, train.head(0), predictor="xgboost", params=params, min_rows=10, progress=False, extrapolate=True)
    truth = big["time_ms"].to_numpy()
    assert (plain.predict_ms(big) < 0.2 * truth).all(), "trees saturate at the largest benchmarked layer"
    np.testing.assert_allclose(extra.predict_ms(big), truth, rtol=0.35)
    inside = _rows(_sizes(np.random.default_rng(2), 50, 256))
    np.testing.assert_allclose(extra.predict_ms(inside), plain.predict_ms(inside))  # no change inside the range


def test_selection_keeps_the_best_per_op_and_round_trips(tmp_path):
    rng = np.random.default_rng(3)
    train, val = _rows(_sizes(rng, 300, 512), 0), _rows(_sizes(rng, 80, 512), 1)
    model, grid = select_step_time_model(
        train, val, candidates={"linear": {}, "xgboost": {"n_estimators": 100}}, feature_sets=["baseline", "ct"], min_rows=10, progress=False
    )
    g = pl.DataFrame(grid)
    chosen = g.filter(pl.col("selected") & (pl.col("op") == "linear"))
    assert chosen.height == 1
    assert chosen["mape_pct"][0] == g.filter(pl.col("op") == "linear")["mape_pct"].min()
    assert g.filter(pl.col("op") == "linear").height == 4  # 2 predictors × 2 feature sets
    model.save(tmp_path / "m")
    again = StepTimeModel.load(tmp_path / "m")
    np.testing.assert_allclose(again.predict_ms(val), model.predict_ms(val), rtol=1e-6)


def test_rare_ops_fall_back_to_the_pooled_model():
    rng = np.random.default_rng(4)
    train = _rows(_sizes(rng, 60, 128))
    model, _ = fit_step_time_model(train, train.head(0), predictor="linear", params={}, min_rows=1000, progress=False)
    assert set(model.ops) == {"_pooled"} and model.model_for("linear") == "_pooled"
    assert (model.predict_ms(train) > 0).all()
    with pytest.raises(KeyError):
        StepTimeModel().model_for("linear")


def test_compute_floor_keeps_predictions_at_or_above_flops_over_peak():
    rng = np.random.default_rng(5)
    train = _rows(_sizes(rng, 300, 256))
    big = _rows([(2048, 4096, 4096)])
    params = {"n_estimators": 100, "early_stopping_rounds": None}
    plain, _ = fit_step_time_model(train, train.head(0), predictor="xgboost", params=params, min_rows=10, progress=False)
    floored, _ = fit_step_time_model(train, train.head(0), predictor="xgboost", params=params, min_rows=10, progress=False, compute_floor=True)
    assert plain.predict_ms(big)[0] < big["ct_ms"][0]
    assert floored.predict_ms(big)[0] == pytest.approx(big["ct_ms"][0])


def test_selection_in_worker_processes_gives_the_same_grid():
    rng = np.random.default_rng(3)
    train, val = _rows(_sizes(rng, 200, 512), 0), _rows(_sizes(rng, 60, 512), 1)
    kw = dict(candidates={"linear": {}, "xgboost": {"n_estimators": 30}}, feature_sets=["baseline", "ct"], min_rows=10, progress=False)
    _, one = select_step_time_model(train, val, **kw)
    _, two = select_step_time_model(train, val, workers=2, **kw)
    a, b = pl.DataFrame(one), pl.DataFrame(two)
    assert a.select("op", "predictor", "feature_set", "selected").equals(b.select("op", "predictor", "feature_set", "selected"))
    np.testing.assert_allclose(a["mape_pct"].to_numpy(), b["mape_pct"].to_numpy(), rtol=1e-9)


GPU = HardwareSpec("gpu-test", "gpu", 10.0, 500.0, 1000, 1500.0)


def _linear_rows(hw, direction, sizes, efficiency, seed=0):
    rng = np.random.default_rng(seed)
    rows = [
        {
            "source": "x",
            "hardware_id": hw.hardware_id,
            "threads": 1 if hw.kind == "cpu" else 0,
            "dtype": "float32",
            "op": "linear",
            "direction": direction,
            "optimizer": "sgd" if direction == "train_step" else "none",
            "activation": "none",
            **{c: None for c in ALL_SHAPE_COLUMNS},
            "batch": b,
            "in_features": i,
            "out_features": o,
        }
        for b, i, o in sizes
    ]
    df = featurize(pl.DataFrame(rows, schema_overrides={c: pl.Int64 for c in ALL_SHAPE_COLUMNS}), {hw.hardware_id: hw})
    return df.with_columns(pl.Series("time_ms", df["roofline_ms"].to_numpy() / efficiency * rng.lognormal(0, 0.02, df.height)))


def test_gpu_rows_of_a_direction_never_trained_on_come_from_the_gpu_roofline(tmp_path):
    rng = np.random.default_rng(4)
    # CPU rows in both directions (10 % of the roofline), GPU rows forward only (50 %)
    train = pl.concat(
        [
            _linear_rows(HW, "forward", _sizes(rng, 150, 256), 0.1),
            _linear_rows(HW, "train_step", _sizes(rng, 150, 256), 0.1, 1),
            _linear_rows(GPU, "forward", _sizes(rng, 150, 256), 0.5, 2),
        ]
    )
    model, _ = fit_step_time_model(train, train.head(0), predictor="xgboost", params={"n_estimators": 60}, min_rows=10, progress=False)
    assert model.gpu_transfer["coverage"]["linear"] == ["cpu/forward", "cpu/train_step", "gpu/forward"]
    assert model.gpu_transfer["efficiency"]["trainable"] == pytest.approx(0.5, rel=0.05)
    gpu_step = _linear_rows(GPU, "train_step", _sizes(np.random.default_rng(5), 20, 256), 0.5, 3)
    np.testing.assert_allclose(model.predict_ms(gpu_step), gpu_step["roofline_ms"].to_numpy() / model.gpu_transfer["efficiency"]["trainable"])
    gpu_fwd = _linear_rows(GPU, "forward", _sizes(np.random.default_rng(6), 20, 256), 0.5, 4)
    np.testing.assert_allclose(model.predict_ms(gpu_fwd), gpu_fwd["time_ms"].to_numpy(), rtol=0.5)  # covered: the regressor answers
    model.save(tmp_path / "m")
    np.testing.assert_allclose(StepTimeModel.load(tmp_path / "m").predict_ms(gpu_step), model.predict_ms(gpu_step))
