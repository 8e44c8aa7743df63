"""XGBoost regression trees evaluated with numpy, from the booster's own JSON model file.

The op-level efficiency models are trained with XGBoost (``train_ops``) but answered here: importing xgboost costs
~1.7 s on 2 cores (it imports scikit-learn when that is installed), which a CLI that answers in seconds cannot pay.
The evaluation follows XGBoost's rules exactly: features and thresholds in float32, ``x < threshold`` goes to the left
child, a missing value (NaN) follows the node's default direction, and the margin is ``base_score`` plus the sum of
the leaves reached (``reg:squarederror``: the margin is the prediction). ``tests/test_ops.py`` checks it against
``xgboost.Booster.predict``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
        p = Path(path)
        if not p.is_file():
            raise PrenetError(f"tree model {p} does not exist; rerun `dvc repro train_ops`")
        return Forest.from_json(p.read_bytes(), str(p))

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.raw)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The margin of every row of ``x`` [rows × features] (float64 out, float32 arithmetic as XGBoost's)."""
        x = np.asarray(x, np.float32)
        rows = np.arange(x.shape[0])[:, None]
        trees = np.arange(self.feature.shape[0])[None, :]
        node = np.zeros((x.shape[0], self.feature.shape[0]), np.int64)
        for _ in range(self.depth):
            v = x[rows, self.feature[trees, node]]
            go_left = np.where(np.isnan(v), self.default_left[trees, node], v < self.threshold[trees, node])
            nxt = np.where(go_left, self.left[trees, node], self.right[trees, node])
            node = np.where(self.leaf[trees, node], node, nxt)
        leaves = self.value[trees, node]
        return (np.float32(self.base_score) + leaves.sum(axis=1, dtype=np.float32)).astype(np.float64)


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path of one tree (node 0 is the root)."""
    depth, frontier = 0, [0]
    while True:
        nxt = [c for n in frontier for c in (left[n], right[n]) if c != -1]
        if not nxt:
            return depth
        depth, frontier = depth + 1, nxt
