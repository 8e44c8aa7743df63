"""When a loss curve reaches a target. Curves are arrays indexed by SGD step (index 0 = before training).

* relative ε (Zancato et al.'s training time): the first step t with |L_t − L_T| ≤ ε·(L_0 − L_T), L_T the
  loss at the end of the horizon; ``None`` when the curve made no progress (L_T ≥ L_0) or is not finite.
* absolute τ: the first step with L_t ≤ τ.
* accuracy a: the first step with training accuracy ≥ a.
"""

from __future__ import annotations

import numpy as np

from prenet.errors import PrenetError

TARGET_KINDS = ("relative_eps", "loss", "accuracy")
#: ``prenet plan`` / ``predict convergence`` option → target kind.
OPTION_KIND = {"converge_eps": "relative_eps", "eps": "relative_eps", "target_loss": "loss", "target_accuracy": "accuracy"}


def check_target(kind: str, value: float) -> float:
    """``value`` when it is a target a curve can reach: relative ε in (0, 1), loss > 0, accuracy in (0, 1]; else a
    :class:`PrenetError` saying what to give (checked before any work)."""
    v = float(value)
    ok = {"relative_eps": 0 < v < 1, "loss": v > 0 and np.isfinite(v), "accuracy": 0 < v <= 1}
    if kind not in ok:
        raise PrenetError(f"unknown target kind {kind!r}; choose one of {', '.join(TARGET_KINDS)}")
    if not ok[kind]:
        need = {
            "relative_eps": "a relative ε in (0, 1), e.g. 0.1",
            "loss": "a loss above 0 (cross-entropy and MSE cannot reach 0 or below)",
            "accuracy": "an accuracy in (0, 1], e.g. 0.9 (a fraction, not a percentage)",
        }[kind]
        raise PrenetError(f"target {kind} = {value} cannot be reached; give {need}")
    return v


def steps_to_converge(loss: np.ndarray, eps: float) -> int | None:
    L0, LT = float(loss[0]), float(loss[-1])
    if not (np.isfinite(L0) and np.isfinite(LT)) or LT >= L0:
        return None
    ok = np.flatnonzero(np.abs(loss - LT) <= eps * (L0 - LT))
    return int(ok[0]) if ok.size else None


def steps_to_loss(loss: np.ndarray, tau: float) -> int | None:
    ok = np.flatnonzero(np.nan_to_num(loss, nan=np.inf) <= tau)
    return int(ok[0]) if ok.size else None


def steps_to_accuracy(accuracy: np.ndarray | None, a: float) -> int | None:
    if accuracy is None:
        return None
    ok = np.flatnonzero(accuracy >= a)
    return int(ok[0]) if ok.size else None


def steps_to(kind: str, loss: np.ndarray, accuracy: np.ndarray | None, value: float) -> int | None:
    if kind == "relative_eps":
        return steps_to_converge(loss, value)
    if kind == "loss":
        return steps_to_loss(loss, value)
    if kind == "accuracy":
        return steps_to_accuracy(accuracy, value)
    raise ValueError(f"unknown target kind {kind!r}; choose one of {', '.join(TARGET_KINDS)}")
