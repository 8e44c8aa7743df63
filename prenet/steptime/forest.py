"""XGBoost regression trees evaluated with numpy, from the booster's own JSON model file.

The op-level efficiency models are trained with XGBoost (``train_ops``) but answered here: importing xgboost costs
~1.7 s on 2 cores (it imports scikit-learn when that is installed), which a CLI that answers in seconds cannot pay.
The evaluation follows XGBoost's rules exactly: features and thresholds in float32, ``x < threshold`` goes to the left
child, a missing value (NaN) follows the node's default direction, and the margin is ``base_score`` plus the sum of
the leaves reached (``reg:squarederror``: the margin is the prediction). ``tests/test_ops.py`` checks it against
``xgboost.Booster.predict``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from prenet.errors import PrenetError


@dataclass(frozen=True)
class Forest:
    """Trees as padded arrays [tree, node]: split feature, threshold (float32), children, default-left, leaf flag and
    leaf value; ``raw`` is the JSON model it was read from (written back by :meth:`save`)."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    leaf: np.ndarray
    value: np.ndarray
    base_score: float
    depth: int
    feature_names: tuple[str, ...]
    raw: bytes

    @staticmethod
    def from_json(raw: bytes, where: str = "the model") -> "Forest":
        """Read an XGBoost JSON model (``Booster.save_raw("json")`` or a ``.json`` model file) of a ``gbtree``
        regression booster."""
        try:
            learner = json.loads(raw)["learner"]
            booster = learner["gradient_booster"]
            trees = booster["model"]["trees"]
            base = learner["learner_model_param"]["base_score"]
        except (KeyError, TypeError, ValueError) as e:
            raise PrenetError(f"{where} is not an XGBoost JSON tree model ({type(e).__name__}: {e}); rerun `dvc repro train_ops`") from e
        if booster.get("name") != "gbtree":
            raise PrenetError(f"{where} is a {booster.get('name')!r} booster; prenet reads gbtree models only (rerun `dvc repro train_ops`)")
        base_score = float(str(base).strip("[]").split(",")[0])
        n = max(len(t["left_children"]) for t in trees)
        shape = (len(trees), n)
        feature = np.zeros(shape, np.int64)
        threshold = np.zeros(shape, np.float32)
        left = np.zeros(shape, np.int64)
        right = np.zeros(shape, np.int64)
        default_left = np.zeros(shape, bool)
        leaf = np.ones(shape, bool)
        value = np.zeros(shape, np.float32)
        depth = 0
        for i, t in enumerate(trees):
            k = len(t["left_children"])
            lc = np.asarray(t["left_children"], np.int64)
            is_leaf = lc == -1
            feature[i, :k] = t["split_indices"]
            threshold[i, :k] = np.asarray(t["split_conditions"], np.float32)
            left[i, :k] = np.where(is_leaf, 0, lc)
            right[i, :k] = np.where(is_leaf, 0, np.asarray(t["right_children"], np.int64))
            default_left[i, :k] = np.asarray(t["default_left"], bool)
            leaf[i, :k] = is_leaf
            value[i, :k] = np.where(is_leaf, threshold[i, :k], 0.0)
            depth = max(depth, _depth(lc, np.asarray(t["right_children"], np.int64)))
        names = tuple(learner.get("feature_names") or ())
        return Forest(feature, threshold, left, right, default_left, leaf, value, base_score, depth, names, bytes(raw))

    @staticmethod
    def load(path: str | Path) -> "Forest":
        """The model in JSON file ``path``, read from its ``.npz`` array twin when that was saved from the same JSON
        (checked by digest): parsing a 250-tree JSON took ~50 ms per family of a CLI answer, the arrays ~1 ms."""
        p = Path(path)
        if not p.is_file():
            raise PrenetError(f"tree model {p} does not exist; rerun `dvc repro train_ops`")
        raw = p.read_bytes()
        twin = p.with_suffix(".npz")
        if twin.is_file():
            with np.load(twin) as z:
                if str(z["digest"]) == _digest(raw):
                    arrays = {k: z[k] for k in _ARRAYS}
                    return Forest(
                        **arrays, base_score=float(z["base_score"]), depth=int(z["depth"]), feature_names=tuple(z["feature_names"].tolist()), raw=raw
                    )
        return Forest.from_json(raw, str(p))

    def save(self, path: str | Path) -> None:
        """The JSON model at ``path`` and its arrays beside it (``.npz``, with the JSON's digest)."""
        p = Path(path)
        p.write_bytes(self.raw)
        arrays = {k: getattr(self, k) for k in _ARRAYS}
        names = np.asarray(self.feature_names, dtype=str)
        with open(p.with_suffix(".npz"), "wb") as f:
            np.savez(f, **arrays, base_score=self.base_score, depth=self.depth, feature_names=names, digest=_digest(self.raw))

    @cached_property
    def _flat(self) -> tuple[np.ndarray, ...]:
        """The trees flattened to one node array (node ids absolute: tree·width + node) with each leaf its own child,
        so that a walk of ``depth`` steps needs no leaf test: (feature, threshold, default-left, left, right, value)."""
        t, n = self.feature.shape
        node = np.arange(t * n, dtype=np.int64).reshape(t, n)
        base = node[:, :1]
        left = np.where(self.leaf, node, base + self.left).ravel()
        right = np.where(self.leaf, node, base + self.right).ravel()
        return self.feature.ravel(), self.threshold.ravel(), self.default_left.ravel(), left, right, self.value.ravel()

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The margin of every row of ``x`` [rows × features] (float64 out, float32 arithmetic as XGBoost's)."""
        x = np.asarray(x, np.float32)
        rows, width = x.shape
        feature, threshold, default_left, left, right, value = self._flat
        node = np.repeat((np.arange(self.feature.shape[0], dtype=np.int64) * self.feature.shape[1])[None, :], rows, axis=0)
        row_base = (np.arange(rows, dtype=np.int64) * width)[:, None]
        flat_x = x.ravel()
        for _ in range(self.depth):
            v = flat_x.take(row_base + feature.take(node))
            go_left = np.where(np.isnan(v), default_left.take(node), v < threshold.take(node))
            node = np.where(go_left, left.take(node), right.take(node))
        return (np.float32(self.base_score) + value.take(node).sum(axis=1, dtype=np.float32)).astype(np.float64)


_ARRAYS = ("feature", "threshold", "left", "right", "default_left", "leaf", "value")


def _digest(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path of one tree (node 0 is the root), one level at a time."""
    depth, frontier = 0, np.zeros(1, np.int64)
    while True:
        nxt = np.concatenate([left[frontier], right[frontier]])
        nxt = nxt[nxt != -1]
        if nxt.size == 0:
            return depth
        depth, frontier = depth + 1, nxt
