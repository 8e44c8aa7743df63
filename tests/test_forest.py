"""The numpy tree evaluator answers exactly what XGBoost answers, from the booster's own JSON model."""

import numpy as np
import pytest
import xgboost as xgb

from prenet.errors import PrenetError
from prenet.steptime.forest import Forest


def _booster(x: np.ndarray, y: np.ndarray, **params) -> xgb.Booster:
    p = {"objective": "reg:squarederror", "nthread": 1, "verbosity": 0, "max_depth": 6, "eta": 0.1, **params}
    return xgb.train(p, xgb.DMatrix(x, label=y), num_boost_round=60)


def test_forest_matches_xgboost_with_missing_values_and_uneven_trees(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)) * [1, 10, 0.1, 1e3, 1]
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values follow each node's default direction
    y = np.nan_to_num(np.sin(x[:, 0]) + 0.01 * x[:, 3] + (x[:, 1] > 2)) + 3.0  # base_score far from 0.5
    b = _booster(x, y, max_depth=8, min_child_weight=5)
    forest = Forest.from_json(bytes(b.save_raw("json")))
    test = rng.normal(size=(300, 5)) * [1, 10, 0.1, 1e3, 1]
    test[rng.random(test.shape) < 0.1] = np.nan
    np.testing.assert_allclose(forest.predict(test), b.predict(xgb.DMatrix(test)), rtol=1e-6, atol=1e-5)
    b.save_model(str(tmp_path / "m.json"))
    np.testing.assert_allclose(Forest.load(tmp_path / "m.json").predict(test), forest.predict(test))
    forest.save(tmp_path / "f.json")  # the JSON and its array twin
    twin = Forest.load(tmp_path / "f.json")
    np.testing.assert_array_equal(twin.predict(test), forest.predict(test))
    assert (twin.depth, twin.feature_names, twin.raw) == (forest.depth, forest.feature_names, forest.raw)


def test_forest_ignores_an_array_twin_of_another_model(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    one, two = (Forest.from_json(bytes(_booster(x, y * s).save_raw("json"))) for s in (1.0, -1.0))
    one.save(tmp_path / "m.json")
    (tmp_path / "m.json").write_bytes(two.raw)  # the JSON replaced, its old twin left beside it
    np.testing.assert_array_equal(Forest.load(tmp_path / "m.json").predict(x), two.predict(x))


def test_forest_refuses_what_it_cannot_read(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"learner": {}}')
    with pytest.raises(PrenetError, match="not an XGBoost JSON tree model"):
        Forest.load(bad)
    with pytest.raises(PrenetError, match="does not exist"):
        Forest.load(tmp_path / "missing.json")
