"""Per-layer-type regressors behind one interface, each saved in a safe format (no pickle).

=================  =========================================================  ======================
name               model                                                      saved as
=================  =========================================================  ======================
``xgboost``        gradient-boosted trees (``xgboost.XGBRegressor``, hist)    XGBoost JSON
``random_forest``  random forest (``xgboost.XGBRFRegressor``: bagged trees,   XGBoost JSON
                   row and column subsampling, no boosting)
``gbdt``           classic gradient boosting (scikit-learn), trees exported   JSON
                   to arrays
``mlp``            multilayer perceptron (torch), standardized inputs         ``state_dict`` + JSON
``linear``         ridge regression on standardized inputs (closed form)      JSON
=================  =========================================================  ======================

All are fitted on ln(time in ms) and predict it back; inputs are the design matrix of
:func:`prenet.recipe.features.design_matrix`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import xgboost as xgb
from torch import nn
from tqdm.auto import tqdm

from prenet.data.io import write_json
from prenet.errors import ConfigError
from prenet.paths import REPO_ROOT


class Regressor(Protocol):
    name: str

    def fit(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray | None = None, y_val: np.ndarray | None = None) -> "Regressor": ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...

    def save(self, stem: Path) -> list[Path]: ...


class _TqdmCallback(xgb.callback.TrainingCallback):
    def __init__(self, total: int, desc: str, enabled: bool):
        self.bar = tqdm(total=total, desc=desc, unit="tree", disable=not enabled, leave=False)

    def after_iteration(self, model, epoch, evals_log) -> bool:
        self.bar.update(1)
        return False

    def after_training(self, model):
        self.bar.close()
        return model


class XGBoostRegressor:
    name = "xgboost"

    def __init__(
        self,
        *,
        n_estimators: int,
        max_depth: int,
        learning_rate: float,
        subsample: float,
        colsample_bytree: float,
        min_child_weight: float,
        early_stopping_rounds: int | None,
        n_jobs: int = 1,
        seed: int = 0,
        progress: bool = False,
    ):
        self.params = dict(
            n_estimators=n_estimators,
            max_depth=max_depth,
            learning_rate=learning_rate,
            subsample=subsample,
            colsample_bytree=colsample_bytree,
            min_child_weight=min_child_weight,
            n_jobs=n_jobs,
            random_state=seed,
            tree_method="hist",
        )
        self.early_stopping_rounds = early_stopping_rounds
        self.progress = progress
        self.model: xgb.XGBRegressor | None = None

    def fit(self, X, y, X_val=None, y_val=None):
        use_es = self.early_stopping_rounds and X_val is not None and len(X_val) > 0
        self.model = xgb.XGBRegressor(
            **self.params,
            early_stopping_rounds=self.early_stopping_rounds if use_es else None,
            callbacks=[_TqdmCallback(self.params["n_estimators"], f"{self.name}", self.progress)],
        )
        self.model.fit(X, y, eval_set=[(X_val, y_val)] if use_es else None, verbose=False)
        return self

    def predict(self, X):
        assert self.model is not None, "fit or load the model first"
        return self.model.predict(X)

    def save(self, stem: Path) -> list[Path]:
        p = stem.with_suffix(".json")
        self.model.get_booster().save_model(p)
        return [p]

    @classmethod
    def load(cls, stem: Path, **params: Any) -> "XGBoostRegressor":
        self = cls(**params)
        self.model = xgb.XGBRegressor()
        self.model.load_model(stem.with_suffix(".json"))
        return self


class RandomForestRegressor(XGBoostRegressor):
    name = "random_forest"

    def __init__(
        self,
        *,
        n_estimators: int,
        max_depth: int,
        subsample: float,
        colsample_bynode: float,
        min_child_weight: float,
        n_jobs: int = 1,
        seed: int = 0,
        progress: bool = False,
    ):
        self.params = dict(
            n_estimators=n_estimators,
            max_depth=max_depth,
            subsample=subsample,
            colsample_bynode=colsample_bynode,
            min_child_weight=min_child_weight,
            n_jobs=n_jobs,
            random_state=seed,
            tree_method="hist",
        )
        self.progress = progress
        self.model = None

    def fit(self, X, y, X_val=None, y_val=None):
        # XGBRFRegressor grows all trees in one boosting round; progress is per fit, not per tree.
        self.model = xgb.XGBRFRegressor(**self.params)
        self.model.fit(X, y, verbose=False)
        return self

    @classmethod
    def load(cls, stem: Path, **params: Any) -> "RandomForestRegressor":
        self = cls(**params)
        self.model = xgb.XGBRFRegressor()
        self.model.load_model(stem.with_suffix(".json"))
        return self


class GBDTRegressor:
    """Classic gradient boosting (Friedman): scikit-learn's ``GradientBoostingRegressor`` with shallow trees and
    no column subsampling. The fitted trees are exported to plain arrays (JSON) and evaluated with numpy, so the
    in-memory and the loaded model predict identically and no pickle is involved."""

    name = "gbdt"

    def __init__(self, *, n_estimators: int, max_depth: int, learning_rate: float, subsample: float, seed: int = 0):
        self.params = dict(n_estimators=n_estimators, max_depth=max_depth, learning_rate=learning_rate, subsample=subsample, random_state=seed)
        self.init = 0.0
        self.trees: list[dict[str, np.ndarray]] = []

    def fit(self, X, y, X_val=None, y_val=None):
        from sklearn.ensemble import GradientBoostingRegressor

        gb = GradientBoostingRegressor(loss="squared_error", **self.params).fit(X, y)
        self.init = float(np.asarray(gb.init_.constant_).ravel()[0])
        self.trees = []
        for est in gb.estimators_[:, 0]:
            t = est.tree_
            self.trees.append(
                {
                    "left": t.children_left.copy(),
                    "right": t.children_right.copy(),
                    "feature": t.feature.copy(),
                    "threshold": t.threshold.copy(),
                    "value": t.value[:, 0, 0] * self.params["learning_rate"],
                }
            )
        return self

    def predict(self, X):
        X = np.asarray(X, dtype=np.float64)
        out = np.full(len(X), self.init)
        rows = np.arange(len(X))
        for t in self.trees:
            node = np.zeros(len(X), dtype=np.int64)
            while True:
                inner = t["left"][node] != -1
                if not inner.any():
                    break
                go_left = X[rows, np.maximum(t["feature"][node], 0)] <= t["threshold"][node]
                node = np.where(inner, np.where(go_left, t["left"][node], t["right"][node]), node)
            out += t["value"][node]
        return out

    def save(self, stem: Path) -> list[Path]:
        p = stem.with_suffix(".json")
        write_json({"params": self.params, "init": self.init, "trees": [{k: v.tolist() for k, v in t.items()} for t in self.trees]}, p)
        return [p]

    @classmethod
    def load(cls, stem: Path, **params: Any) -> "GBDTRegressor":
        d = json.loads(stem.with_suffix(".json").read_text())
        self = cls(**{**params, **{k: v for k, v in d["params"].items() if k != "random_state"}})
        self.init = d["init"]
        self.trees = [{k: np.asarray(v) for k, v in t.items()} for t in d["trees"]]
        return self


class _Standardizer:
    def __init__(self, mean: np.ndarray, std: np.ndarray):
        self.mean, self.std = mean, std

    @classmethod
    def fit(cls, X: np.ndarray) -> "_Standardizer":
        std = X.std(axis=0)
        return cls(X.mean(axis=0), np.where(std > 1e-12, std, 1.0))

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean) / self.std


class LinearRegressor:
    name = "linear"

    def __init__(self, *, alpha: float):
        self.alpha = alpha
        self.scaler: _Standardizer | None = None
        self.coef: np.ndarray | None = None
        self.intercept = 0.0

    def fit(self, X, y, X_val=None, y_val=None):
        self.scaler = _Standardizer.fit(X)
        Z = self.scaler(X)
        self.intercept = float(np.mean(y))
        A = Z.T @ Z + self.alpha * len(Z) * np.eye(Z.shape[1])
        self.coef = np.linalg.solve(A, Z.T @ (y - self.intercept))
        return self

    def predict(self, X):
        return self.scaler(X) @ self.coef + self.intercept

    def save(self, stem: Path) -> list[Path]:
        p = stem.with_suffix(".json")
        write_json(
            {
                "alpha": self.alpha,
                "mean": self.scaler.mean.tolist(),
                "std": self.scaler.std.tolist(),
                "coef": self.coef.tolist(),
                "intercept": self.intercept,
            },
            p,
        )
        return [p]

    @classmethod
    def load(cls, stem: Path, **params: Any) -> "LinearRegressor":
        d = json.loads(stem.with_suffix(".json").read_text())
        self = cls(alpha=d["alpha"])
        self.scaler = _Standardizer(np.asarray(d["mean"]), np.asarray(d["std"]))
        self.coef, self.intercept = np.asarray(d["coef"]), float(d["intercept"])
        return self


class MLPRegressor:
    name = "mlp"

    def __init__(
        self,
        *,
        hidden: list[int] | tuple[int, ...],
        epochs: int,
        batch_size: int,
        lr: float,
        weight_decay: float,
        patience: int,
        seed: int = 0,
        progress: bool = False,
    ):
        self.hidden = [int(h) for h in hidden]
        self.epochs, self.batch_size, self.lr, self.weight_decay, self.patience = epochs, batch_size, lr, weight_decay, patience
        self.seed, self.progress = seed, progress
        self.scaler: _Standardizer | None = None
        self.y_mean, self.y_std = 0.0, 1.0
        self.net: nn.Sequential | None = None

    def _build(self, n_in: int) -> nn.Sequential:
        layers: list[nn.Module] = []
        for h in self.hidden:
            layers += [nn.Linear(n_in, h), nn.SiLU()]
            n_in = h
        layers.append(nn.Linear(n_in, 1))
        return nn.Sequential(*layers).double()

    def fit(self, X, y, X_val=None, y_val=None):
        torch.manual_seed(self.seed)
        self.scaler = _Standardizer.fit(X)
        self.y_mean, self.y_std = float(np.mean(y)), float(np.std(y) or 1.0)
        Xt = torch.from_numpy(self.scaler(X))
        yt = torch.from_numpy((y - self.y_mean) / self.y_std)
        has_val = X_val is not None and len(X_val) > 0
        if has_val:
            Xv = torch.from_numpy(self.scaler(X_val))
            yv = torch.from_numpy((y_val - self.y_mean) / self.y_std)
        self.net = self._build(X.shape[1])
        opt = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.epochs)
        g = torch.Generator().manual_seed(self.seed)
        best, best_state, bad = float("inf"), None, 0
        bar = tqdm(range(self.epochs), desc="mlp", unit="epoch", disable=not self.progress, leave=False)
        for _ in bar:
            self.net.train()
            perm = torch.randperm(len(Xt), generator=g)
            for i in range(0, len(Xt), self.batch_size):
                idx = perm[i : i + self.batch_size]
                opt.zero_grad()
                loss = nn.functional.mse_loss(self.net(Xt[idx]).squeeze(-1), yt[idx])
                loss.backward()
                opt.step()
            sched.step()
            if has_val:
                self.net.eval()
                with torch.no_grad():
                    v = float(nn.functional.mse_loss(self.net(Xv).squeeze(-1), yv))
                bar.set_postfix(val_mse=f"{v:.4f}")
                if v < best - 1e-6:
                    best, bad = v, 0
                    best_state = {k: t.clone() for k, t in self.net.state_dict().items()}
                else:
                    bad += 1
                    if bad >= self.patience:
                        break
        if best_state is not None:
            self.net.load_state_dict(best_state)
        return self

    def predict(self, X):
        self.net.eval()
        with torch.no_grad():
            z = self.net(torch.from_numpy(self.scaler(np.asarray(X, dtype=np.float64)))).squeeze(-1).numpy()
        return z * self.y_std + self.y_mean

    def save(self, stem: Path) -> list[Path]:
        pt, meta = stem.with_suffix(".pt"), stem.with_suffix(".json")
        torch.save(self.net.state_dict(), pt)
        write_json(
            {
                "hidden": self.hidden,
                "n_in": int(len(self.scaler.mean)),
                "mean": self.scaler.mean.tolist(),
                "std": self.scaler.std.tolist(),
                "y_mean": self.y_mean,
                "y_std": self.y_std,
            },
            meta,
        )
        return [pt, meta]

    @classmethod
    def load(cls, stem: Path, **params: Any) -> "MLPRegressor":
        d = json.loads(stem.with_suffix(".json").read_text())
        self = cls(**{**params, "hidden": d["hidden"]})
        self.scaler = _Standardizer(np.asarray(d["mean"]), np.asarray(d["std"]))
        self.y_mean, self.y_std = d["y_mean"], d["y_std"]
        self.net = self._build(d["n_in"])
        self.net.load_state_dict(torch.load(stem.with_suffix(".pt"), weights_only=True))
        return self


REGRESSORS: dict[str, type] = {c.name: c for c in (XGBoostRegressor, RandomForestRegressor, GBDTRegressor, MLPRegressor, LinearRegressor)}


#: Settings the pipeline passes to every regressor (not from conf/predictor/); a class that has no use for one does
#: not take it, and it is dropped for that class.
RUN_SETTINGS = ("seed", "n_jobs", "progress")


def _check_setting(name: str, key: str, value: Any, annotation: str) -> Any:
    """``value`` of ``predictor.<key>`` if it has the kind its constructor declares (integer, number, flag, list of
    integers; null where the annotation allows None); else one line naming the setting, the expected kind and the file."""
    nullable = "None" in annotation
    kind = annotation.split("|")[0].strip()

    def bad(kind: str) -> ConfigError:
        return ConfigError(f"predictor.{key}={value!r}: expected {kind} (predictor {name}, conf/predictor/{name}.yaml)")

    if value is None:
        if nullable:
            return value
        raise bad("a value (null is not allowed)")
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise bad("an integer")
        return int(value)
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
    elif kind.startswith(("list", "tuple")):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise bad("a list of integers")
    return value


@functools.lru_cache(maxsize=None)
def predictor_defaults(name: str) -> dict[str, Any]:
    """The settings of ``conf/predictor/<name>.yaml``: the only place a predictor's defaults are written (the
    constructors have none), so the library and the pipeline agree."""
    from omegaconf import OmegaConf

    path = REPO_ROOT / "conf" / "predictor" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown predictor {name!r}; choose one of {', '.join(sorted(REGRESSORS))} (conf/predictor/)")
    d = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(d, dict)
    return {str(k): v for k, v in d.items() if k != "name"}


def _settings(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The constructor keywords of predictor ``name``: ``conf/predictor/<name>.yaml`` overridden by ``params``. Every
    key must be one of its settings (or a :data:`RUN_SETTINGS` key), of the kind its constructor declares. A typo or a
    wrong type is refused in one line."""
    import inspect

    if name not in REGRESSORS:
        raise ConfigError(f"unknown predictor {name!r}; choose one of {', '.join(sorted(REGRESSORS))} (conf/predictor/)")
    sig = {k: p for k, p in inspect.signature(REGRESSORS[name].__init__).parameters.items() if k != "self"}
    unknown = sorted(k for k in params if k not in sig and k not in RUN_SETTINGS)
    if unknown:
        raise ConfigError(
            f"predictor {name} has no setting {', '.join('predictor.' + k for k in unknown)}; its settings are "
            f"{', '.join(k for k in sig if k not in RUN_SETTINGS)} (conf/predictor/{name}.yaml)"
        )
    merged = {**predictor_defaults(name), **params}
    return {k: _check_setting(name, k, v, str(sig[k].annotation)) for k, v in merged.items() if k in sig}


def make_regressor(name: str, **params: Any) -> Regressor:
    """A fresh regressor by config name (``predictor.name``) with checked settings (see :func:`_settings`)."""
    settings = _settings(name, params)  # an unknown name is refused here
    return REGRESSORS[name](**settings)


def load_regressor(name: str, stem: Path, **params: Any) -> Regressor:
    return REGRESSORS[name].load(stem, **_settings(name, params))
