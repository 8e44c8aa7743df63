"""Per-layer-type step-time models: fit on the development rows, save, load, predict (ms).

A :class:`StepTimeModel` holds one regressor per op (and a pooled regressor over all ops that answers for ops
too rare to have their own). Each op's entry records its predictor kind and feature set, so a model whose
entries were chosen per op on the validation split (PreNeT's recipe, :func:`select_step_time_model`) is the
same object as one trained with a single configuration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from prenet.data.io import write_json
from prenet.recipe.features import POOLED, design_matrix, from_log_target, log_target
from prenet.recipe.metrics import error_metrics
from prenet.recipe.regressors import Regressor, load_regressor, make_regressor

MANIFEST = "manifest.json"


#: Regression targets: ``time`` fits ln(ms); ``roofline_ratio`` fits ln(ms / roofline ms), the inverse of the
#: attained fraction of the roofline (NeuSight-style utilisation), which carries across hardware better because
#: the hardware's scale is already in the roofline.
TARGETS = ("time", "roofline_ratio")


@dataclass
class OpModel:
    predictor: str
    feature_set: str
    params: dict[str, Any]
    regressor: Regressor
    columns: list[str]
    target: str = "time"
    #: Per ``"<cpu|gpu>/<direction>"``: the largest roofline time (ms) among the training rows and the median
    #: measured/roofline ratio of the largest 10 % of them. A layer beyond that range (larger than anything
    #: benchmarked on that kind of hardware) is predicted as max(regressor, ratio × roofline): time keeps growing
    #: with the work at the efficiency of the largest measured layers, where trees would saturate. None: off.
    extrapolate_above_ms: dict[str, list[float]] | None = None
    #: Never predict a layer faster than its FLOPs at the hardware's peak (``ct_ms``): trees extrapolating past the
    #: benchmarked range otherwise fall below that physical bound.
    compute_floor: bool = False

    def to_target(self, df: pl.DataFrame) -> np.ndarray:
        y = log_target(df.get_column("time_ms").to_numpy())
        return y - np.log(df.get_column("roofline_ms").to_numpy()) if self.target == "roofline_ratio" else y

    def from_target(self, df: pl.DataFrame, z: np.ndarray) -> np.ndarray:
        if self.target == "roofline_ratio":
            z = z + np.log(df.get_column("roofline_ms").to_numpy())
        t = from_log_target(z)
        if self.extrapolate_above_ms:
            keys = _range_keys(df)
            roof = df.get_column("roofline_ms").to_numpy()
            limit = np.array([self.extrapolate_above_ms.get(k, [np.inf, 0.0])[0] for k in keys])
            ratio = np.array([self.extrapolate_above_ms.get(k, [np.inf, 0.0])[1] for k in keys])
            t = np.where(roof > limit, np.maximum(t, ratio * roof), t)
        if self.compute_floor:
            t = np.maximum(t, df.get_column("ct_ms").to_numpy())
        return t


@dataclass
class StepTimeModel:
    """One fitted regressor per op (plus :data:`POOLED`).

    ``gpu_transfer`` (:func:`fit_gpu_transfer`): which kinds of hardware and directions each entry's training rows
    covered, and the attained roofline fraction of the GPU rows. A GPU row whose (kind, direction) its entry never
    saw — batch norm, pooling, dropout, recurrent and attention layers have only CPU timings; no source has GPU
    forward+backward timings of parameter-free ops — would otherwise get a CPU-scale time from the trees; it is
    predicted as roofline time / the median attained fraction of the GPU rows of its class (with or without
    parameters) instead."""

    ops: dict[str, OpModel] = field(default_factory=dict)
    name: str = "steptime"
    gpu_transfer: dict[str, Any] | None = None

    @property
    def predictor(self) -> str:
        kinds = sorted({m.predictor for m in self.ops.values()})
        return kinds[0] if len(kinds) == 1 else "per-op:" + "+".join(kinds)

    @property
    def feature_set(self) -> str:
        sets = sorted({m.feature_set for m in self.ops.values()})
        return sets[0] if len(sets) == 1 else "per-op"

    def model_for(self, op: str) -> str:
        """The entry answering for ``op``: its own, else the pooled one."""
        if op in self.ops:
            return op
        if POOLED in self.ops:
            return POOLED
        raise KeyError(f"no step-time model for op {op!r}; trained ops: {', '.join(sorted(self.ops))}")

    def predict_ms(self, df: pl.DataFrame) -> np.ndarray:
        """Predicted ms per row of a LayerFeatures-shaped table."""
        out = np.full(df.height, np.nan)
        ops = df.get_column("op").to_numpy()
        for op in np.unique(ops):
            mask = ops == op
            which = self.model_for(op)
            entry = self.ops[which]
            rows = df.filter(pl.Series(mask))
            X, _ = design_matrix(rows, which, entry.feature_set)
            out[mask] = entry.from_target(rows, entry.regressor.predict(X))
            if self.gpu_transfer:
                out[mask] = self._transfer(rows, which, op, out[mask])
        return out

    def _transfer(self, rows: pl.DataFrame, which: str, op: str, t: np.ndarray) -> np.ndarray:
        """GPU rows of a (kind, direction) the entry never trained on: roofline / attained fraction (see class doc)."""
        from prenet.layers import REGISTRY

        seen = set(self.gpu_transfer["coverage"].get(which, []))
        keys = _range_keys(rows)
        uncovered = np.array([k.startswith("gpu/") and k not in seen for k in keys])
        if not uncovered.any():
            return t
        cls = "trainable" if op in REGISTRY and REGISTRY[op].trainable else "parameter_free"
        eff = self.gpu_transfer["efficiency"].get(cls)
        if not eff:
            return t
        roof = rows.get_column("roofline_ms").to_numpy()
        return np.where(uncovered, roof / eff, t)

    def save(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, Any] = {"name": self.name, "ops": {}, "gpu_transfer": self.gpu_transfer, **(extra or {})}
        for op, m in self.ops.items():
            files = [p.name for p in m.regressor.save(d / op)]
            manifest["ops"][op] = {
                "predictor": m.predictor,
                "feature_set": m.feature_set,
                "params": m.params,
                "columns": m.columns,
                "files": files,
                "target": m.target,
                "extrapolate_above_ms": m.extrapolate_above_ms,
                "compute_floor": m.compute_floor,
            }
        return write_json(manifest, d / MANIFEST)

    @classmethod
    def load(cls, directory: str | Path) -> "StepTimeModel":
        d = Path(directory)
        if not (d / MANIFEST).exists():
            from prenet.errors import PrenetError

            raise PrenetError(f"no trained step-time model in {d}; run `dvc repro train` (or `make run`) first")
        m = json.loads((d / MANIFEST).read_text())
        ops = {
            op: OpModel(
                e["predictor"],
                e["feature_set"],
                e["params"],
                load_regressor(e["predictor"], d / op, **e["params"]),
                e["columns"],
                e.get("target", "time"),
                e.get("extrapolate_above_ms"),
                e.get("compute_floor", False),
            )
            for op, e in m["ops"].items()
        }
        return cls(ops, m.get("name", "steptime"), m.get("gpu_transfer"))


def _range_keys(df: pl.DataFrame) -> list[str]:
    kind = np.where(df.get_column("hw_is_gpu").to_numpy() > 0.5, "gpu", "cpu")
    return [f"{k}/{d}" for k, d in zip(kind, df.get_column("direction").to_list())]


def fit_gpu_transfer(train: pl.DataFrame, ops: Iterable[str]) -> dict[str, Any]:
    """Coverage of each entry's training rows ("<cpu|gpu>/<direction>" keys) and, per class of op (with
    parameters / parameter-free), the median attained roofline fraction (roofline ms / measured ms) of the GPU
    training rows — see :class:`StepTimeModel`."""
    from prenet.layers import REGISTRY

    keys = np.array(_range_keys(train))
    op_col = train.get_column("op").to_numpy()
    coverage = {op: sorted(set(keys.tolist() if op == POOLED else keys[op_col == op].tolist())) for op in ops}
    gpu = train.filter(pl.Series(np.char.startswith(keys.astype(str), "gpu/")))
    eff: dict[str, float] = {}
    n: dict[str, int] = {}
    if gpu.height:
        trainable = np.array([REGISTRY[o].trainable if o in REGISTRY else True for o in gpu.get_column("op").to_list()])
        frac = gpu.get_column("roofline_ms").to_numpy() / gpu.get_column("time_ms").to_numpy()
        for cls, m in (("trainable", trainable), ("parameter_free", ~trainable)):
            if m.any():
                eff[cls], n[cls] = float(np.median(frac[m])), int(m.sum())
    return {"coverage": coverage, "efficiency": eff, "gpu_rows": n}


def _range_limits(tr: pl.DataFrame) -> dict[str, list[float]]:
    """See :attr:`OpModel.extrapolate_above_ms`."""
    out: dict[str, list[float]] = {}
    keyed = tr.with_columns(pl.Series("_k", _range_keys(tr)))
    for (k,), g in keyed.group_by(["_k"]):
        roof = g.get_column("roofline_ms").to_numpy()
        top = roof >= np.quantile(roof, 0.9)
        out[k] = [float(roof.max()), float(np.median(g.get_column("time_ms").to_numpy()[top] / roof[top]))]
    return out


def _fit_one(
    tr: pl.DataFrame,
    va: pl.DataFrame,
    op: str,
    predictor: str,
    params: dict[str, Any],
    feature_set: str,
    progress: bool,
    target: str = "time",
    extrapolate: bool = False,
    compute_floor: bool = False,
) -> tuple[OpModel, dict[str, float]]:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    X, cols = design_matrix(tr, op, feature_set)
    reg = make_regressor(predictor, **{**params, "progress": progress})
    entry = OpModel(predictor, feature_set, params, reg, cols, target, _range_limits(tr) if extrapolate else None, compute_floor)
    Xv, yv = (design_matrix(va, op, feature_set)[0], entry.to_target(va)) if va.height else (None, None)
    reg.fit(X, entry.to_target(tr), Xv, yv)
    metrics = error_metrics(va.get_column("time_ms").to_numpy(), entry.from_target(va, reg.predict(Xv))) if va.height else {"n": 0}
    return entry, metrics


def _ops_to_fit(train: pl.DataFrame, min_rows: int) -> list[str]:
    counts = dict(train.group_by("op").len().iter_rows())
    return sorted(op for op, n in counts.items() if n >= min_rows) + [POOLED]


def _rows_of(df: pl.DataFrame, op: str) -> pl.DataFrame:
    return df if op == POOLED else df.filter(pl.col("op") == op)


def fit_step_time_model(
    train: pl.DataFrame,
    val: pl.DataFrame,
    *,
    predictor: str,
    params: dict[str, Any],
    feature_set: str = "ct",
    min_rows: int = 20,
    progress: bool = True,
    name: str = "steptime",
    target: str = "time",
    extrapolate: bool = False,
    compute_floor: bool = False,
) -> tuple[StepTimeModel, dict[str, dict[str, float]]]:
    """Fit one regressor per op with at least ``min_rows`` train rows, and a pooled regressor over all ops, on
    ``train`` (early stopping on ``val``). Returns the model and the validation metrics per op. ``extrapolate``
    and ``compute_floor``: see :class:`OpModel`."""
    model = StepTimeModel(name=name)
    val_metrics: dict[str, dict[str, float]] = {}
    for op in tqdm(_ops_to_fit(train, min_rows), desc=f"train {name}: {predictor}/{feature_set}", unit="op", disable=not progress):
        model.ops[op], val_metrics[op] = _fit_one(
            _rows_of(train, op),
            _rows_of(val, op),
            op,
            predictor,
            params,
            feature_set,
            progress=False,
            target=target,
            extrapolate=extrapolate,
            compute_floor=compute_floor,
        )
    model.gpu_transfer = fit_gpu_transfer(train, model.ops)
    return model, val_metrics


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _select_op(job: tuple) -> tuple[str, OpModel, list[dict[str, Any]]]:
    """Every (predictor, feature set) of one op; the best on validation MAPE and the op's grid rows."""
    op, tr, va, combos, candidates = job
    best: tuple[float, OpModel] | None = None
    rows = []
    for p, fs in combos:
        entry, m = _fit_one(tr, va, op, p, candidates[p], fs, progress=False)
        score = m.get("mape_pct", float("inf"))
        rows.append({"op": op, "predictor": p, "feature_set": fs, **m})
        if best is None or score < best[0]:
            best = (score, entry)
    for r in rows:
        r["selected"] = r["predictor"] == best[1].predictor and r["feature_set"] == best[1].feature_set
    return op, best[1], rows


def select_step_time_model(
    train: pl.DataFrame,
    val: pl.DataFrame,
    *,
    candidates: dict[str, dict[str, Any]],
    feature_sets: Iterable[str],
    min_rows: int = 20,
    progress: bool = True,
    name: str = "selected",
    fallback: OpModel | None = None,
    workers: int = 1,
) -> tuple[StepTimeModel, list[dict[str, Any]]]:
    """PreNeT's recipe: for each op, fit every candidate predictor on every feature set and keep the one with
    the lowest validation MAPE. Returns the selected model and the whole grid (op, predictor, feature set,
    validation metrics, selected flag) — the shape of PreNeT's Table 4. ``workers`` > 1 fits the ops in that many
    spawned processes (same results, in op order). ``fallback`` (e.g. the pooled entry of
    an already fitted model) answers for the rare ops instead of selecting a pooled model too."""
    model = StepTimeModel(name=name)
    grid: list[dict[str, Any]] = []
    ops = _ops_to_fit(train, min_rows)
    if fallback is not None:
        ops.remove(POOLED)
        model.ops[POOLED] = fallback
    combos = [(p, fs) for p in candidates for fs in feature_sets]
    bar = tqdm(total=len(ops) * len(combos), desc="select (op × predictor × feature set)", unit="fit", disable=not progress)
    jobs = [(op, _rows_of(train, op), _rows_of(val, op), combos, candidates) for op in ops]
    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # independent per op: fitted in `workers` spawned processes (one torch thread each; fork can deadlock after
        # OpenMP has started in this process); results in op order
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_one_thread) as ex:
            results = []
            for res in ex.map(_select_op, jobs):
                results.append(res)
                bar.update(len(combos))
    else:
        results = []
        for job in jobs:
            results.append(_select_op(job))
            bar.update(len(combos))
    for op, best, rows in results:
        model.ops[op] = best
        grid += rows
    bar.close()
    model.gpu_transfer = fit_gpu_transfer(train, model.ops)
    return model, grid
