"""Every predictor learns a simple law and round-trips through its safe on-disk format."""

import numpy as np
import pytest

from prenet.recipe.regressors import REGRESSORS, load_regressor, make_regressor

SMALL = {
    "xgboost": {"n_estimators": 150},
    "gbdt": {"n_estimators": 100},
    "random_forest": {"n_estimators": 50},
    "mlp": {"epochs": 60, "hidden": [32, 32]},
    "linear": {},
}


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 3, size=(n, 3))
    y = 1.5 * X[:, 0] + 0.5 * X[:, 1] - 0.2 * X[:, 2] + 0.3
    return X, y


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_fits_and_round_trips(name, tmp_path):
    X, y = _data(1500, 0)
    Xv, yv = _data(300, 1)
    reg = make_regressor(name, **SMALL[name], seed=0).fit(X, y, Xv, yv)
    pred = reg.predict(Xv)
    rmse = float(np.sqrt(np.mean((pred - yv) ** 2)))
    assert rmse < 0.35 * float(np.std(yv)), f"{name} did not learn: rmse {rmse}"
    files = reg.save(tmp_path / "m")
    assert all(p.suffix in (".json", ".pt") for p in files), "models are saved in safe formats only"
    again = load_regressor(name, tmp_path / "m", **SMALL[name])
    np.testing.assert_allclose(again.predict(Xv), pred, rtol=1e-5, atol=1e-6)


def test_unknown_predictor_names_the_choices():
    with pytest.raises(ValueError, match="gbdt, linear, mlp, random_forest, xgboost"):
        make_regressor("svm")


def test_defaults_live_only_in_conf_predictor():
    """Constructors declare the settings without defaults; conf/predictor/<name>.yaml gives every one of them."""
    import inspect

    from prenet.recipe.regressors import REGRESSORS, RUN_SETTINGS, predictor_defaults

    for name, cls in REGRESSORS.items():
        sig = {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self" and k not in RUN_SETTINGS}
        assert all(p.default is inspect.Parameter.empty for p in sig.values()), name
        assert set(predictor_defaults(name)) == set(sig), name
    assert make_regressor("xgboost").params["n_estimators"] == predictor_defaults("xgboost")["n_estimators"]
