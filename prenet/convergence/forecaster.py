"""``forecast``: the predicted loss curve of fine-tuning a network, from its linearization, without training.

Steps (all timed into ``Forecast.seconds``):

1. the empirical NTK Θ at the given weights on the fine-tuning samples, or on a seeded subset of ``subset``
   of them (see :mod:`prenet.convergence.dynamics` for why the subset's dynamics estimate the full set's). With
   ``ntk="auto"`` the class-averaged K ⊗ I_C where it drops little of Θ (:func:`~prenet.convergence.ntk.choose_estimator`,
   ``details["ntk_chosen"]`` says which and why);
2. the function-space dynamics (``dynamics_kind="auto"``): the ODE when the batch is the whole set; else the exact
   linearized SGD averaged over batch orders when the kernel covers all N samples and N·C ≤
   ``dynamics.EXACT_MAX_NC``; else the SDE. With momentum, the ODE is the heavy-ball second-order system and the SDE
   carries the velocity (:mod:`prenet.convergence.dynamics`);
3. the kernel's drift (``correction``):

   * ``trajectory`` (the default, no training): at fixed fractions of the steps (``RELINEARIZE_AT``, then
     ``FOLLOW_ON_AT`` where the cost budget allows) the weights the
     linearized network has reached, w₀ − Jᵀ D (D the paths' mean displacement in coefficient space, one backward
     pass), are set on a copy of the network. The kernel is measured there on ``DRIFT_SAMPLES`` samples; where it moved
     by more than ``drift_threshold`` (‖ΔΘ‖_F/‖Θ‖_F) the whole kernel is recomputed and the dynamics go on with it,
     carrying the paths' outputs and weight-space velocity. Once a kernel has moved that far, the next point computes
     the whole kernel straight away. Fine-tuning that moves the features (out of regime, the
     kernel grows) is followed at the cost of a few more kernels; where the kernel stays, the static forecast answers
     unchanged. ``drift`` is ‖Θ_last − Θ₀‖_F/‖Θ₀‖_F, ``details["relinearized"]`` has one record per point
     (and one at the horizon's end where none found the kernel moving: its drift makes the verdict). The
     exact and SDE dynamics are followed; the full-batch ODE keeps its kernel.
   * ``probe``: a short real fine-tuning of a copy of the network for k = ⌈probe_fraction · steps⌉ steps, Θ recomputed
     at the probed weights, and the kernel drift ‖Θ_k − Θ_0‖_F / ‖Θ_0‖_F reported. A drift above ``drift_threshold``
     marks the plain forecast unreliable; ``corrected`` is the forecast re-linearized at the probed weights: the
     probe's real losses for steps 0..k, then the dynamics from (F_k, Θ_k) for the remaining steps. It costs k real
     steps, which caps the forecast at 1/probe_fraction times cheaper than training.
   * ``none``: the kernel at the pre-trained weights throughout.

**The best answer is the default.** ``forecast()`` returns the trajectory-followed forecast (``variant ==
"relinearized"`` where the kernel was recomputed, else ``"plain"``); with ``correction="probe"`` the corrected forecast
when the probe flags the plain one. ``also_plain`` keeps the static-kernel curve beside it (``.plain``). Before any
dynamics run, the learning rate is checked against the linearized stability bound
(:func:`prenet.convergence.dynamics.check_stable`): a diverging lr is one error naming the largest stable lr.
"""

from __future__ import annotations

import copy
import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_info, threadpool_limits
from torch import nn

from prenet.convergence import dynamics, losses, targets
from prenet.convergence.ntk import (
    DEFAULT_MAX_BYTES,
    ProblemTooLargeError,
    choose_estimator,
    empirical_ntk,
    largest_fitting_subset,
    outputs,
    relative_error,
    required_bytes,
)
from prenet.errors import PrenetError
from prenet.names import CORRECTIONS

DYNAMICS = ("auto", "ode", "sde", "exact")
#: Where ``correction="trajectory"`` may re-linearize, as fractions of the step budget (geometric: the kernel moves
#: most while the loss falls fastest). The 1 % point (2026-12-07): on the four 30,000-sample checks, over eight subset
#: draws each, the median over the checks of the median q·L0 step error fell in 7 draws of 8 (median over the draws
#: 34.3 -> 26.4 %), the out-of-regime kernel being followed before its first crossing; one more drift check.
RELINEARIZE_AT = (0.01, 0.025, 0.08, 0.25)
#: Further points (fractions of the steps) checked as the base points are, where the cost allows (:func:`trajectory`'s
#: ``follow_budget``): where fine-tuning keeps learning features, a kernel last checked at 25 % answers the last three
#: quarters stale. On the poor-transfer pair (even → odd digits,
#: ``scripts/check_poor_transfer.py``, seeds 0 / 1 / 2) the median step error went 26.3 / 33.6 / 50.0 → 16.8 / 22.3 /
#: 33.8 % (2026-12-07).
FOLLOW_ON_AT = (0.5, 0.75)
#: A further point for fine-tunes so short that ``CEILING_FLOOR_S`` rules the forecast's cost (the cost target's budget
#: is less): between the 8 % and 25 % points a growing kernel is answered stale. On the poor-transfer pair (400 steps,
#: ~1 s of SGD; seeds 0 / 1 / 2) the median step error went 17.7 / 22.9 / 34.4 → 13.7 / 18.8 / 30.2 % (2026-12-08). Not
#: on fine-tunes the cost target sizes: on the 30,000-sample checks it cost 8-12 % of the cost ratio for 19.1 → 18.9 %.
SHORT_FOLLOW_ON_AT = (0.15,)
#: Samples on which a candidate kernel's drift is measured before the whole kernel is recomputed (at the first point, and
#: after any point where the kernel stayed: on the four full-data reference checks all 12 points re-linearized, so a
#: sample kernel after a move was thrown away each time).
DRIFT_SAMPLES = 32
#: Held-out samples on which a subset forecast measures its generalization gap (forward passes only), and where along
#: the steps (fractions; the end is always one).
HELDOUT_SAMPLES = 256
HELDOUT_AT = RELINEARIZE_AT
#: A gap is measured on the network at the linearized weights; where that network's outputs on the fitted samples are
#: further than this from the linearized outputs (a share of how far those moved), the linearization no longer holds
#: there and the gap is not used (measured on the 30,000-sample relabel check: 0.07–0.45 at m = 0, where the midpoint
#: tracked the real loss within 7 %; 1.7 and 5.1 late at m = 0.9, where the gap came out at +1.5 and −9.4 nats). Each
#: gap is judged on its own: a network back within it later is used again (2026-12-07: on the four 30,000-sample
#: checks over eight subset draws, the median q·L0 step error over the draws 24.2 → 19.4 %, the BN split at m = 0.9
#: better in 6 draws of 8, where a gap off at step 23 had left its later ones, 0.37–0.47 off, unused)
HELDOUT_MAX_OFF_LINEAR = 0.5
#: Seconds a forecast may always take before re-linearizations are skipped as dearer than the fine-tune: a fine-tune of
#: a second or two makes every kernel after the first "dearer", while the re-linearizations cost little in absolute
#: terms and carry the accuracy out of regime (a user's MLP fine-tuned on new digits, 256 samples, 500 steps, 0.2 s of
#: SGD: all three skipped, the steps to each target 30-37 % too few; re-linearized, 6-10 % at m = 0, for 0.1 s more).
CEILING_FLOOR_S = 5.0
#: The default forecast's cost target: this many times cheaper than the fine-tune it predicts, where the problem allows.
COST_TARGET = 30.0
#: A cross-entropy forecast whose loss rises above this multiple of its starting loss has diverged (above its curvature
#: bound a CE fine-tune may still train, since the curvature shrinks as predictions sharpen; one that multiplies its loss
#: does not)
DIVERGED_GROWTH = 10.0


class DearerWarning(UserWarning):
    """A forecast that took longer than the fine-tune it predicts would (:func:`forecast`'s ``warn_dearer``)."""


def ce_diverged(L: np.ndarray, L0: float, classes: int) -> bool:
    """Whether a cross-entropy loss curve ``L`` (nats) has diverged from its start ``L0``: it rose above
    ``DIVERGED_GROWTH`` × ``L0`` and above ln C (a near-converged start may rise to the noise floor)."""
    return not (np.nanmax(L) <= max(DIVERGED_GROWTH * L0, math.log(max(classes, 2))))


@dataclass
class Forecast:
    """A predicted fine-tuning curve. ``loss``/``accuracy``: per step 0..steps (length steps + 1), on the
    forecast's samples (all N, or the subset). ``seconds``: wall time of the whole forecast (NTK, dynamics and
    probe). ``drift``/``reliable`` are set by the trajectory correction and by the probe, ``corrected`` by the probe."""

    loss: np.ndarray
    accuracy: np.ndarray | None
    seconds: float
    dynamics: str
    ntk_method: str
    n_samples: int
    n_used: int
    n_params: int
    ntk_seconds: float
    drift: float | None = None
    reliable: bool | None = None
    probe_steps: int = 0
    corrected: "Forecast | None" = None
    ode: "Forecast | None" = None
    details: dict = field(default_factory=dict)
    variant: str = "plain"
    plain_forecast: "Forecast | None" = None

    @property
    def steps(self) -> int:
        return len(self.loss) - 1

    @property
    def plain(self) -> "Forecast":
        """The plain (static-kernel) forecast, whichever variant answers: kept with ``also_plain`` (trajectory) or by the
        probe; otherwise this forecast itself."""
        return self.plain_forecast if self.plain_forecast is not None else self

    def steps_to_loss(self, tau: float) -> int | None:
        """First step with predicted loss ≤ ``tau`` (> 0); ``None`` if not within ``steps``."""
        return targets.steps_to_loss(self.loss, targets.check_target("loss", tau))

    def steps_to_accuracy(self, a: float) -> int | None:
        """First step with predicted training accuracy ≥ ``a`` (in (0, 1]); ``None`` if not within ``steps``."""
        return targets.steps_to_accuracy(self.accuracy, targets.check_target("accuracy", a))

    def steps_to_converge(self, eps: float) -> int | None:
        """First step with |L_t − L_T| ≤ eps·(L_0 − L_T) (relative ε in (0, 1)); ``None`` if the curve does not descend."""
        return targets.steps_to_converge(self.loss, targets.check_target("relative_eps", eps))

    def best(self) -> "Forecast":
        """This forecast: ``forecast()`` already returns the most reliable variant (kept for callers of earlier versions)."""
        return self


def _labels(targets_: torch.Tensor | np.ndarray, n: int) -> np.ndarray:
    y = np.asarray(targets_.cpu() if isinstance(targets_, torch.Tensor) else targets_)
    if y.ndim != 1 or len(y) != n or not np.issubdtype(y.dtype, np.integer):
        raise PrenetError(f"targets must be integer class labels of shape ({n},); got dtype {y.dtype}, shape {y.shape}")
    return y.astype(np.int64)


def run_dynamics(
    kind: str,
    theta: np.ndarray,
    F0: np.ndarray,
    y: np.ndarray,
    *,
    loss: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    n_full: int,
    seed: int,
    sde_paths: int,
    progress: bool = False,
    lam_max: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The curve of dynamics ``kind``; ``lam_max``: λ_max(Θ) when the caller has it (the SDE's sub-stepping needs it)."""
    if steps <= 0:
        return np.array([losses.value(F0, losses.onehot(y, F0.shape[1]), loss)]), np.array([losses.accuracy(F0, y)])
    if kind == "ode":
        return dynamics.ode(theta, F0, y, kind=loss, lr=lr, momentum=momentum, steps=steps)
    if kind == "exact":
        return dynamics.exact_sgd(
            theta, F0, y, kind=loss, lr=lr, momentum=momentum, batch_size=batch_size, steps=steps, paths=sde_paths, seed=seed, progress=progress
        )
    return dynamics.sde(
        theta,
        F0,
        y,
        kind=loss,
        lr=lr,
        momentum=momentum,
        batch_size=batch_size,
        steps=steps,
        n_full=n_full,
        paths=sde_paths,
        seed=seed,
        progress=progress,
        lam_max=lam_max,
    )


@dataclass
class Budget:
    """The default forecast's cost budget: ``seconds`` of wall time from ``start`` (``time.perf_counter()``), set from
    the fine-tune's estimated cost ÷ the cost target (:func:`training_seconds`)."""

    seconds: float
    start: float

    def allows(self, more: float) -> bool:
        """Whether ``more`` seconds of work still fit."""
        return time.perf_counter() - self.start + more <= self.seconds

    def spares(self, more: float, rest: float = 0.0) -> bool:
        """Whether a kernel of ``more`` seconds is skipped for cost: the budget holds ``rest`` (the work left without it)
        and not with it; where even ``rest`` breaks the budget, the more accurate forecast is the better use of the time."""
        return not self.allows(more) and self.allows(rest)


def training_seconds(
    model: nn.Module, inputs: torch.Tensor, targets: np.ndarray, *, loss: str, lr: float, momentum: float, batch_size: int, steps: int, seed: int
) -> tuple[float, float]:
    """(seconds of one real SGD step, the fine-tune's ``steps`` steps): the median of 3 timed steps of a copy of
    ``model`` at ``batch_size`` on this machine and thread count, after one untimed warm-up step. The step is the
    heavy-ball update ``torch.optim.SGD`` runs (its foreach form: buf ← m·buf + g, w ← w − η·buf), written out: building
    a ``torch.optim`` optimizer first imports ``torch._dynamo``, 1.4 s once per process here, which is not the step's."""
    net = copy.deepcopy(model)
    net.eval()
    params = [q for q in net.parameters() if q.requires_grad]
    bufs = [torch.zeros_like(q) for q in params]
    y = torch.as_tensor(targets, device=inputs.device)
    times = []
    for b in dynamics.batch_schedule(len(inputs), batch_size, 4, seed):
        idx = torch.as_tensor(b, device=inputs.device)
        t0 = time.perf_counter()
        for q in params:
            q.grad = None
        losses.torch_loss(net(inputs[idx]), y[idx], loss).backward()
        with torch.no_grad():
            grads = [q.grad for q in params]
            if momentum:
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, grads)
            torch._foreach_add_(params, bufs if momentum else grads, alpha=-lr)
        if inputs.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times = times[1:]  # the first step warms up
    step = float(np.median(times))
    return step, step * steps


def _move(model: nn.Module, x: torch.Tensor, D: np.ndarray) -> None:
    """Move ``model``'s weights (in place) as the linearized network moves under the coefficient displacement ``D``
    (n·C, :func:`dynamics.sde_segment`): w ← w − Jᵀ D, one backward pass of Σᵢ ⟨f(xᵢ), Dᵢ⟩ over the n samples."""
    model.eval()
    model.zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.as_tensor(D.reshape(out.shape), dtype=out.dtype, device=out.device)).sum().backward()
    with torch.no_grad():
        for q in model.parameters():
            if q.grad is not None:
                q -= q.grad
    model.zero_grad(set_to_none=True)


def _moved_copy(model: nn.Module, x: torch.Tensor, D: np.ndarray) -> nn.Module:
    """A copy of ``model`` moved as the linearized network moves under ``D`` (:func:`_move`); ``model`` is untouched."""
    cand = copy.deepcopy(model)
    _move(cand, x, D)
    return cand


def _gap(
    step: int, net: nn.Module, x: torch.Tensor, y: np.ndarray, heldout: tuple[torch.Tensor, np.ndarray], loss: str, F_lin: np.ndarray, F0: np.ndarray
) -> dict:
    """The generalization gap of ``net`` at ``step``: its loss and accuracy on the held-out samples minus those on its
    fitted samples (``x``, ``y``); ``off_linear``, how far its fitted outputs are from the linearized ones ``F_lin``
    (‖F_net − F_lin‖_F / ‖F_lin − F0‖_F, 0 at step 0); ``used``: whether that is within ``HELDOUT_MAX_OFF_LINEAR``."""
    vals = []
    for xs, ys in ((heldout[0], heldout[1]), (x, y)):
        F = outputs(net, xs).double().cpu().numpy()
        vals.append((losses.value(F, losses.onehot(ys, F.shape[1]), loss), losses.accuracy(F, ys)))
    moved = float(np.linalg.norm(F_lin - F0))
    off = float(np.linalg.norm(F - F_lin) / moved) if moved > 0 else 0.0
    return {
        "step": step,
        "loss_gap": vals[0][0] - vals[1][0],
        "accuracy_gap": vals[0][1] - vals[1][1],
        "off_linear": off,
        "used": off <= HELDOUT_MAX_OFF_LINEAR,
    }


def _inner_steps(fractions: Sequence[float], steps: int) -> set[int]:
    """The steps at ``fractions`` of a ``steps``-step horizon (rounded), those strictly inside it."""
    return {k for k in (int(round(f * steps)) for f in fractions) if 0 < k < steps}


def trajectory(
    kind: str,
    model: nn.Module,
    x: torch.Tensor,
    y: np.ndarray,
    theta0: np.ndarray,
    F0: np.ndarray,
    *,
    loss: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    n_full: int,
    seed: int,
    sde_paths: int,
    lam_max: float,
    at: Sequence[float],
    drift_threshold: float,
    method: str,
    proj_dim: int,
    max_bytes: int,
    progress: bool = False,
    budget: "Budget | None" = None,
    kernel_seconds: float = 0.0,
    ceiling: "Budget | None" = None,
    heldout: tuple[torch.Tensor, np.ndarray] | None = None,
    heldout_at: Sequence[float] = HELDOUT_AT,
    follow_on: Sequence[float] = FOLLOW_ON_AT,
    follow_budget: "Budget | None" = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict], list[dict]]:
    """The dynamics ``kind`` (``sde`` or ``exact``) re-linearized along their own trajectory, without training: at each fraction ``at`` of the steps, the
    weights of the linearized network (w₀ − Jᵀ D, D the mean displacement of the paths so far) are set on a copy of
    ``model``; the kernel is measured there on the first ``DRIFT_SAMPLES`` samples, and where it moved by more than
    ``drift_threshold`` (‖ΔΘ‖_F/‖Θ‖_F) the whole kernel is recomputed and the paths go on with it (their outputs and
    weight-space velocity carried over); after such a move, the next point computes the whole kernel directly and reads
    the sample's drift off its block (adopted, as before, only where that drift is past the threshold). An adopted
    kernel's eigenvalues past the linearized SGD's stability edge are lowered to just inside it
    (:func:`dynamics.cap_at_edge`: real training stays at that edge), and the weights (and their velocity, at the next
    kernel) then move as the capped outputs do. Returns (loss, accuracy, the last kernel measured, one record per
    re-linearization point (and, where no point found the kernel moving, one at the horizon's end, ``end_of_horizon``:
    the drift there makes the verdict ``reliable``, not the dynamics): step, drift on the sample, drift of the whole
    kernel when adopted (``capped``: how many
    directions were lowered, the cap ÷ n and the share of Θ's trace removed), ``whole_kernel`` whether one was computed
    (adopted or not), or ``skipped`` when the cost ``budget``
    would hold without another kernel (at the first kernel's ``kernel_seconds``) and not with it, or when another kernel
    would take the forecast past ``ceiling``: the fine-tune's own estimated time, past which a forecast is dearer than
    the training it predicts). ``follow_on``: further fractions, checked as those of ``at`` where their kernel fits
    ``follow_budget`` (None: no limit; one skipped for it is recorded so). ``heldout`` (inputs, labels of samples outside ``x``): at the fractions ``heldout_at`` and
    at the end, the linearized network's weights are set on a copy and its loss and accuracy gaps (held-out minus fitted)
    measured; the curves move by half the gap, interpolated linearly in steps: the midpoint of the fitted samples'
    (optimistic) and the held-out samples' (pessimistic) curves, ``docs/convergence.md``. A gap whose network has left
    the linearization (``HELDOUT_MAX_OFF_LINEAR``) is recorded, not used: the curve is interpolated between the usable
    ones on either side of it, and the last usable one holds beyond it.
    Also returns one record per such point (:func:`_gap`; empty without ``heldout``)."""
    n, c = F0.shape
    stops = sorted(_inner_steps(at, steps))
    follow_at = _inner_steps(follow_on, steps) - set(stops)
    checks = _inner_steps(heldout_at, steps) | {steps} if heldout else set()
    gaps = [_gap(0, model, x, y, heldout, loss, F0, F0)] if heldout else []
    relin_at, stops = set(stops), sorted((set(stops) | follow_at | checks) - {steps})
    state = dynamics.SDEState.start(F0, sde_paths)
    rng = np.random.default_rng(seed)
    work = copy.deepcopy(model)
    theta, lam, D_acc = theta0, lam_max, np.zeros(n * c)
    theta_dyn, cap = theta0, None  # the kernel the dynamics run on: a re-linearized one capped at the stability edge

    def moved_copy() -> nn.Module:  # the linearized network's weights: as the capped outputs moved
        return _moved_copy(work, x, D_acc if cap is None else cap.weight_coefficients(D_acc))

    Ls, As, records = [], [], []
    F0_loss = float(losses.value(F0, losses.onehot(y, c), loss))
    bounds = [0, *stops, steps]
    s = min(n, DRIFT_SAMPLES)
    batches = dynamics.path_batches(n, batch_size, steps, seed, sde_paths) if kind == "exact" else None
    t_dyn, t_sample = 0.0, kernel_seconds * s / n
    moving = False  # whether the last check found the kernel moving (its next check then goes to the whole kernel)
    with dynamics.progress_bar(steps, f"forecast ({kind}, re-linearized)", progress) as bar:
        for a, b in zip(bounds[:-1], bounds[1:]):
            t_seg = time.perf_counter()
            if batches is not None:
                seg = [bp[a:b] for bp in batches]
                L, A, D = dynamics.exact_segment(theta_dyn, state, y, kind=loss, lr=lr, momentum=momentum, batches=seg, bar=bar)
            else:
                L, A, D = dynamics.sde_segment(
                    theta_dyn,
                    state,
                    y,
                    kind=loss,
                    lr=lr,
                    momentum=momentum,
                    batch_size=batch_size,
                    steps=b - a,
                    n_full=n_full,
                    rng=rng,
                    lam_max=lam,
                    bar=bar,
                )
            t_dyn += time.perf_counter() - t_seg
            Ls.append(L)
            As.append(A)
            D_acc += D
            cand = None
            # the paths' mean, as the answer's curve and its final check take it (one path may rise alone)
            diverged = loss == "cross_entropy" and ce_diverged(np.mean(L, axis=-1), F0_loss, c)
            if b in checks and np.isfinite(L).all() and not diverged:
                cand = moved_copy()
                gaps.append(_gap(b, cand, x, y, heldout, loss, state.F.mean(0), F0))
            if (
                b == steps
                and theta is theta0  # no check found the kernel moving: whether it stayed so up to the horizon (the verdict's)
                and (base := [r for r in records if r["step"] in relin_at])
                and base[-1]["drift_sample"] is not None  # the last base point measured (a follow-on one skipped for cost may follow)
                and np.isfinite(L).all()
                and not diverged
                and (ceiling is None or ceiling.allows(t_sample))
                and not (budget is not None and budget.spares(t_sample))  # as a re-linearization is
            ):
                cand = moved_copy() if cand is None else cand
                sample = empirical_ntk(cand, x[:s], method=method, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes).theta
                drift_end = relative_error(sample, theta[: s * c, : s * c])
                records.append({"step": b, "drift_sample": drift_end, "drift": None, "whole_kernel": False, "end_of_horizon": True})
            # a diverged curve is not re-linearized: its kernel has grown without bound (an eigen-search on it took 12 s
            # of a 17 s answer at lr 1e6) and the answer is the divergence, which the caller says
            follow = b in follow_at  # (never a base point: those are left out of follow_at)
            if b == steps or not (b in relin_at or follow) or not np.isfinite(L).all() or diverged:
                continue
            rest = t_dyn / b * (steps - b)  # the remaining dynamics, at the pace so far
            more = (0.0 if moving else t_sample) + kernel_seconds + rest  # a moving check computes no sample kernel
            if follow and follow_budget is not None and not follow_budget.allows(more):
                records.append({"step": b, "drift_sample": None, "drift": None, "skipped": "cost budget"})
                continue
            # a kernel is skipped only where the budget holds without it: where the target is already out of reach,
            # the more accurate forecast is the better use of the time
            if budget is not None and budget.spares(more, rest):
                records.append({"step": b, "drift_sample": None, "drift": None, "skipped": "cost budget"})
                continue
            if ceiling is not None and not ceiling.allows(more):
                records.append({"step": b, "drift_sample": None, "drift": None, "skipped": "dearer than the fine-tune"})
                continue
            if cand is None:
                cand = moved_copy()
            if moving:  # the kernel moved past the threshold at the last check: this one computes the whole kernel
                new = empirical_ntk(cand, x, method=method, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes).theta
                sample = new[: s * c, : s * c]  # the sample's block: the sample kernel, as its own call computes it
            else:
                t_k = time.perf_counter()
                new, sample = None, empirical_ntk(cand, x[:s], method=method, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes).theta
                t_sample = time.perf_counter() - t_k
            rec = {"step": b, "drift_sample": relative_error(sample, theta[: s * c, : s * c]), "drift": None}
            moving = rec["drift_sample"] > drift_threshold  # the rule either way: a whole kernel computed is adopted only past it
            if moving:
                if new is None:
                    new = empirical_ntk(cand, x, method=method, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes).theta
                rec["drift"] = relative_error(new, theta)
                if cap is not None:  # the weights' velocity, as its coefficients move them under the kernel now capped
                    state.u = cap.weight_coefficients(state.u)
                theta, work, D_acc = new, cand, np.zeros(n * c)
                lam = dynamics.top_eigenvalue(lambda v: theta @ v, n * c)  # once per kernel: the SDE's sub-steps follow it
                theta_dyn, cap = dynamics.cap_at_edge(theta, n, lr=lr, momentum=momentum, kind=loss, lam_max=lam)
                if cap is not None:
                    lam = cap.edge
                    rec["capped"] = {
                        "directions": int(len(cap.shrink)),
                        "edge_over_n": cap.edge / n,
                        "trace_share_removed": float(1.0 - np.trace(theta_dyn) / np.trace(theta)),
                    }
                state.rekernel(theta_dyn)
            rec["whole_kernel"] = new is not None  # computed at this point, adopted or not
            records.append(rec)
    L, A = dynamics.path_means(np.vstack(Ls), np.vstack(As), state, y, loss)
    used = [g for g in gaps if g["used"]]
    if len(used) > 1:  # the midpoint of the fitted and the held-out samples (step 0: the mean of the two samples)
        t = np.arange(len(L))
        at_steps = [g["step"] for g in used]  # held at the last usable gap beyond it
        L = np.maximum(L + 0.5 * np.interp(t, at_steps, [g["loss_gap"] for g in used]), 0.0)
        A = np.clip(A + 0.5 * np.interp(t, at_steps, [g["accuracy_gap"] for g in used]), 0.0, 1.0)
    return L, A, theta, records, gaps


#: Subset sizes the default forecast chooses from, largest first; the smallest is its accuracy floor (64 samples fit
#: their own kernel too soon: the step error doubled on the full-data checks).
SUBSET_SIZES = (512, 256, 128)


def choose_subset(
    model: nn.Module,
    inputs: torch.Tensor,
    N: int,
    C: int,
    *,
    budget: Budget | None,
    steps: int,
    paths: int,
    proj_dim: int,
    max_bytes: int,
    seed: int,
    ntk: str = "auto",
) -> tuple[int | None, str]:
    """The default forecast's samples: (subset size or None for all N, what was chosen and why). All N for a small
    problem (N·C ≤ ``dynamics.EXACT_MAX_NC``, its kernel in memory: the exact linearized SGD, no subset noise). Else the
    largest of ``SUBSET_SIZES`` whose predicted cost fits the ``budget`` (the largest that fits memory when there is no
    budget): four kernels (the first and three
    re-linearizations) at the time of a 32-sample kernel measured here × (n/32)², plus the dynamics, ``paths`` products
    of (n·C)² per step at 10 GFLOP/s; never fewer than the smallest size, and never more samples than fit
    ``max_bytes``. Raises :class:`ProblemTooLargeError` when not even 2·C samples fit."""
    p = sum(int(t.numel()) for t in model.parameters())
    fits = min(required_bytes(N, C, p, m, proj_dim) for m in ("exact", "projection")) <= max_bytes
    if fits and N * C <= dynamics.EXACT_MAX_NC:
        return None, f"all {N} samples (N·C = {N * C} ≤ {dynamics.EXACT_MAX_NC}: the exact linearized SGD)"
    cap, _ = largest_fitting_subset(C, p, proj_dim, max_bytes)
    if cap < max(2 * C, 16):
        raise ProblemTooLargeError(
            f"NTK too large for memory at any useful subset: C={C} outputs × P={p:,} parameters fit {cap} samples in "
            f"{max_bytes / 2**20:,.1f} MiB, fewer than the {max(2 * C, 16)} a forecast needs. To fix: raise max_bytes (--max-gib)"
        )
    sizes = [n for n in SUBSET_SIZES if n <= min(N, cap)] or [min(N, cap)]
    if budget is None or len(sizes) == 1:  # no budget to keep: the most samples (of the sizes) that fit
        return sizes[0], f"a seeded subset of {sizes[0]} of the {N} samples"
    probe = np.sort(np.random.default_rng(seed).choice(N, size=min(32, N), replace=False))
    t32 = empirical_ntk(model, inputs[torch.as_tensor(probe, device=inputs.device)], method=ntk, proj_dim=proj_dim, max_bytes=max_bytes).seconds
    for n in sizes:
        predicted = 4 * t32 * (n / 32) ** 2 + steps * paths * 2 * (n * C) ** 2 / 1e10
        if budget.allows(predicted) or n == sizes[-1]:
            return n, (
                f"a seeded subset of {n} of the {N} samples: the largest of {', '.join(map(str, sizes))} whose predicted cost "
                f"({predicted:.1f} s) fits the budget ({budget.seconds:.1f} s)"
                if budget.allows(predicted)
                else f"a seeded subset of {n} of the {N} samples (the floor: no size fits the budget of {budget.seconds:.1f} s)"
            )
    raise AssertionError("unreachable")


def auto_dynamics(n_full: int, n_used: int, classes: int, batch_size: int) -> str:
    """The default dynamics: ``ode`` for full-batch training; ``exact`` (linearized SGD over batch orders) when the
    kernel covers all samples and N·C ≤ ``dynamics.EXACT_MAX_NC``; else ``sde``."""
    if batch_size >= n_full:
        return "ode"
    if n_used == n_full and n_full * classes <= dynamics.EXACT_MAX_NC:
        return "exact"
    return "sde"


#: A loss or accuracy target reached before 1/REFINE_RATIO of a forecast's horizon is forecast again at twice its
#: answer, at most REFINE_ROUNDS times (:func:`refined`): the re-linearization points are fractions of the horizon, so a
#: long horizon re-linearizes late, and a fine-tune whose kernel grows was answered slower the longer the horizon (a
#: user's MLP with a new head, accuracy 0.9 at 56 steps in training: 107 / 171 at a 2,000-step horizon, 85 at 200;
#: refined, 85-90 from either)
REFINE_RATIO = 4
REFINE_ROUNDS = 3


def refined(run: Callable[[int], tuple[Any, int | None]], horizon: int) -> tuple[Any, int | None, list[tuple[int, int | None]]]:
    """The answer to a loss or accuracy target that does not depend on the horizon: ``run(h)`` forecasts at horizon
    ``h`` and returns (the forecast, the step it reaches the target or None). While the target comes before
    1/``REFINE_RATIO`` of the last horizon, forecast again at twice its step (at most ``REFINE_ROUNDS`` times); a pass
    that does not reach it keeps the last answer. Returns (the forecast that answered, its step, every (horizon,
    step) pass)."""
    fc, steps = run(horizon)
    horizons: list[tuple[int, int | None]] = [(horizon, steps)]
    while steps is not None and REFINE_RATIO * steps <= horizons[-1][0] and len(horizons) <= REFINE_ROUNDS:
        h = max(2 * steps, 8)
        again, at = run(h)
        horizons.append((h, at))
        if at is None:
            break
        fc, steps = again, at
    return fc, steps, horizons


def passes_text(horizons: Sequence[tuple[int, int | None]]) -> str:
    """:func:`refined`'s passes as the answers list them: ``horizon 2,000: 107 steps, horizon 214: 86 steps``."""
    return ", ".join(f"horizon {h:,}: {'not reached' if at is None else f'{at:,} steps'}" for h, at in horizons)


def at_torch_threads(fn: Callable) -> Callable:
    """Run ``fn`` with NumPy's BLAS at torch's thread count (or the caller's BLAS setting where lower): the forecast's cost is weighed against the fine-tune's steps
    at torch's thread count (issue 30: the same machine and threads), and its dynamics' products with Θ are NumPy's.
    Left to itself OpenBLAS takes every core; with another process on the other core the relabel check's SDE took 6.2 s
    at two threads and 1.8 s at one (docs/convergence.md)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # never more than the caller's own setting (threadpoolctl sets the number given, raising a lower one)
        now = [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]
        with threadpool_limits(limits=min([torch.get_num_threads(), *now]), user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper


@at_torch_threads
def forecast(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor | np.ndarray,
    *,
    loss: str = "cross_entropy",
    lr: float,
    momentum: float = 0.0,
    batch_size: int,
    steps: int,
    seed: int = 0,
    subset: int | None = None,
    ntk: str = "auto",
    proj_dim: int = 2000,
    dynamics_kind: str = "auto",
    sde_paths: int = 8,
    correction: str = "trajectory",
    relinearize_at: Sequence[float] = RELINEARIZE_AT,
    probe_fraction: float = 0.05,
    drift_threshold: float = 0.1,
    max_bytes: int = DEFAULT_MAX_BYTES,
    also_ode: bool = False,
    also_plain: bool = False,
    cost_target: float | None = COST_TARGET,
    keep_to_budget: bool = False,
    progress: bool = True,
    raise_on_probe_divergence: bool = True,
    warn_dearer: bool = True,
) -> Forecast:
    """Predict the full-training-set loss (and accuracy) of fine-tuning *all* parameters of ``model`` on
    (``inputs``, integer ``targets``) with SGD (``lr``, heavy-ball ``momentum``, ``batch_size``) for ``steps``
    steps. ``model`` is not modified. ``also_ode``: when the SDE answers, also run the noise-free ODE on the same
    kernel (``.ode``; its ``seconds`` = the kernel's plus its own dynamics). ``subset`` None: chosen by :func:`choose_subset` from N,
    the classes, the parameters, the steps and the cost budget (``details["subset_chosen"]`` says what and why).
    ``cost_target``: the forecast aims at this many times cheaper than the fine-tune (``details["cost"]``; None: no
    budget, no timing); it sizes the subset, and with ``keep_to_budget`` also skips re-linearizations that would break it
    (off by default: on the full-data checks the skipped kernels were where the accuracy came from).
    Raises :class:`~prenet.convergence.ntk.ProblemTooLargeError` before any kernel work (after the 4 timed training steps
    of ``cost_target``) when a given ``subset`` does not fit,
    or not even 2·C samples do, and
    :class:`~prenet.convergence.dynamics.DivergenceError` when ``lr`` breaks the linearized stability bound (before the
    dynamics) or, with ``raise_on_probe_divergence``, when the probe's real fine-tuning diverges. ``progress``: a
    progress bar on stderr for dynamics running longer than 3 s. ``warn_dearer``: a :class:`DearerWarning` where the
    forecast took longer than the fine-tune it predicts would (``details["cost"]``; callers that report the cost
    themselves turn it off). Returns the most reliable variant (module docstring)."""
    losses.check_loss(loss)
    if cost_target is not None and not cost_target > 0:
        raise PrenetError(f"cost_target must be > 0 (times cheaper than the fine-tune) or None, got {cost_target}")
    if correction not in CORRECTIONS:
        raise PrenetError(f"unknown correction {correction!r}; choose one of {', '.join(CORRECTIONS)}")
    if dynamics_kind not in DYNAMICS:
        raise PrenetError(f"unknown dynamics {dynamics_kind!r}; choose one of {', '.join(DYNAMICS)}")
    for bad, rule in (
        (not lr > 0, f"lr={lr}: give a learning rate > 0"),
        (not 0 <= momentum < 1, f"momentum={momentum}: give 0 ≤ momentum < 1"),
        (batch_size < 1, f"batch_size={batch_size}: give at least 1"),
        (steps < 0, f"steps={steps}: give 0 or more"),
    ):
        if bad:
            raise PrenetError(f"forecast({rule})")
    t0 = time.perf_counter()
    N = len(inputs)
    y_all = _labels(targets, N)
    try:
        first = outputs(model, inputs[:1])
    except RuntimeError as e:  # inputs the model does not take (another shape or width): one line, not torch's traceback
        raise PrenetError(
            f"forecast: the model does not run on these inputs (one sample of shape {tuple(inputs.shape[1:])}): "
            f"{str(e).splitlines()[0]}; give the inputs as the model takes them, samples first"
        ) from None
    if first.dim() != 2:
        raise PrenetError(
            f"forecast: the model's output for one sample has shape {tuple(first.shape[1:])}; give a classifier's logits (samples × classes)"
        )
    C = int(first.shape[1])
    if y_all.max() >= C:
        raise PrenetError(f"targets hold class {int(y_all.max())} but the model has {C} outputs; give it a head with ≥ {y_all.max() + 1} outputs")
    ntk_chosen = None
    if ntk == "auto":  # the class-averaged kernel where it drops little of Θ (checked exactly on a few samples)
        ntk, ntk_chosen = choose_estimator(model, inputs, proj_dim=proj_dim, max_bytes=max_bytes, seed=seed, c=C)
    cost: dict = {}
    budget = None
    if cost_target is not None:  # the fine-tune's cost on this machine, from 3 timed real steps: the forecast's budget
        step_s, train_s = training_seconds(model, inputs, y_all, loss=loss, lr=lr, momentum=momentum, batch_size=batch_size, steps=steps, seed=seed)
        budget = Budget(train_s / cost_target, t0)
        cost = {"target": cost_target, "train_step_seconds": step_s, "train_seconds_estimate": train_s, "budget_seconds": budget.seconds}
    # a fine-tune so short that its budget is under CEILING_FLOOR_S is sized and followed within that floor instead
    short = budget is not None and budget.seconds < CEILING_FLOOR_S
    floored = Budget(max(budget.seconds, CEILING_FLOOR_S), t0) if budget is not None else None
    chosen = None
    if subset is None:
        # its subset: a 128-sample subset of a 678-sample poor-transfer fine-tune answered 30 % late on one draw of three
        subset, chosen = choose_subset(
            model,
            inputs,
            N,
            C,
            budget=floored,
            steps=steps,
            paths=sde_paths,
            proj_dim=proj_dim,
            max_bytes=max_bytes,
            seed=seed,
            ntk=ntk,
        )
        if short and subset is not None:
            chosen += (
                f" (the {cost_target:g}x budget, {budget.seconds:.2f} s, is under the {CEILING_FLOOR_S:g} s floor a fine-tune this short is sized to)"
            )
    if subset is not None and subset < N:
        idx = np.sort(np.random.default_rng(seed).choice(N, size=subset, replace=False))
    else:
        idx = np.arange(N)
    x = inputs[torch.as_tensor(idx, device=inputs.device)]
    y = y_all[idx]
    kernel = empirical_ntk(model, x, method=ntk, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes)
    F0 = outputs(model, x).double().cpu().numpy()
    lam_theta, lam_dyn = dynamics.check_stable(kernel.theta, F0, kind=loss, lr=lr, momentum=momentum)
    kind = dynamics_kind if dynamics_kind != "auto" else auto_dynamics(N, len(idx), C, batch_size)
    if kind == "exact" and len(idx) < N:
        raise PrenetError(
            f"dynamics 'exact' simulates SGD on the samples themselves and needs all {N} of them; drop subset={len(idx)} or choose dynamics 'sde'"
        )
    dyn = dict(loss=loss, lr=lr, momentum=momentum, batch_size=batch_size, steps=steps, n_full=N, seed=seed, sde_paths=sde_paths)
    relin: list[dict] | None = None
    theta_last = kernel.theta
    heldout = None
    if len(idx) < N:  # the subset's own loss is optimistic; samples outside it measure by how much
        rest = np.setdiff1d(np.arange(N), idx)
        h = np.sort(np.random.default_rng(seed + 1).choice(rest, size=min(HELDOUT_SAMPLES, len(rest)), replace=False))
        heldout = (inputs[torch.as_tensor(h, device=inputs.device)], y_all[h])
    gaps: list[dict] = []
    if correction == "trajectory" and kind in ("sde", "exact") and steps > 1:
        L, A, theta_last, relin, gaps = trajectory(
            kind,
            model,
            x,
            y,
            kernel.theta,
            F0,
            **dyn,
            lam_max=lam_theta * len(idx),
            at=relinearize_at,
            drift_threshold=drift_threshold,
            method=kernel.method,
            proj_dim=proj_dim,
            max_bytes=max_bytes,
            progress=progress,
            budget=budget if keep_to_budget else None,
            kernel_seconds=kernel.seconds,
            # never dearer than the fine-tune itself: where even the first kernel breaks the budget (many parameters and
            # classes: the Gram's (n·C)²·P FLOPs), the re-linearizations stop at the training's own estimated time, or
            # at CEILING_FLOOR_S where that is less (a second-long fine-tune: the accuracy is what the user pays for)
            ceiling=Budget(max(cost["train_seconds_estimate"], CEILING_FLOOR_S), t0) if cost else None,
            heldout=heldout,
            # the kernel is followed past the base points within the cost target's budget, or CEILING_FLOOR_S where the
            # fine-tune is so short that the budget is less
            follow_budget=floored,
            # where the floor rules (the cost target's budget is less), the kernel's growth between the 8 % and 25 %
            # points is followed too
            follow_on=FOLLOW_ON_AT + (SHORT_FOLLOW_ON_AT if short else ()),
        )
    else:
        L, A = run_dynamics(kind, kernel.theta, F0, y, **dyn, progress=progress, lam_max=lam_theta * len(idx))
    # the CE bound is not a hard one; a near-converged start (tiny L0) may rise to the noise floor: never below ln C
    if loss == "cross_entropy" and ce_diverged(L, float(L[0]), C):
        raise dynamics.DivergenceError(
            f"lr {lr:g}: the linearized fine-tuning diverges (its loss grows from {L[0]:.4g} to {np.nanmax(L):.4g}, "
            f"> {DIVERGED_GROWTH:g}× its start and > ln C); the cross-entropy stability bound at the starting outputs is "
            f"lr < {dynamics.max_stable_lr(lam_dyn, momentum):.4g} (momentum {momentum:g})"
            + (
                f", and the re-linearized kernel moved by {relative_error(theta_last, kernel.theta):.3g} of its norm (a grown kernel lowers that bound)"
                if theta_last is not kernel.theta
                else ""
            )
            # a new user's CNN fine-tune on digits (2026-12-06) trained well at lr 0.5-1, 12-24x that bound, where the
            # linearized one diverged: the network's sharpness falls to the edge of stability, the linearization's cannot
            + ". The real network may diverge too, or still train (its sharpness can fall to what the lr allows, which a "
            "linearization cannot follow): prenet cannot forecast this lr — lower --lr to forecast, or train a few steps to see"
        )
    fc = Forecast(
        L,
        A,
        0.0,
        kind,
        kernel.method,
        N,
        len(idx),
        kernel.n_params,
        kernel.seconds,
        details={
            "effective_lr": dynamics.effective_lr(lr, momentum),
            "theta_max_eig_over_n": lam_theta,
            "max_stable_lr": dynamics.max_stable_lr(lam_dyn, momentum),
            **({"subset_chosen": chosen} if chosen else {}),
            **({"ntk_chosen": ntk_chosen} if ntk_chosen else {}),
            **({"heldout": {"samples": len(heldout[1]), "gaps": gaps}} if gaps and heldout is not None else {}),
        },
    )
    if relin is not None:
        measured = [r["drift_sample"] for r in relin if r.get("drift_sample") is not None]
        fc.details["max_drift_sample"] = max(measured) if measured else None  # the largest drift seen, adopted or not
        # how far the kernel moved over the horizon: the adopted kernels', else the largest drift measured (under the
        # threshold), else unknown: every check was skipped (cost), and the static kernel answers unchecked
        if any(r["drift"] is not None for r in relin):
            fc.drift = relative_error(theta_last, kernel.theta)
        else:
            fc.drift = max(measured) if measured else None
        fc.reliable = None if fc.drift is None else fc.drift <= drift_threshold  # whether the static kernel alone would serve
        fc.details["relinearized"] = relin
        if any(r["drift"] is not None for r in relin):
            fc.variant = "relinearized"
        if also_plain:  # evaluative: its time is not the forecast's
            t_plain = time.perf_counter()
            Lp, Ap = run_dynamics(kind, kernel.theta, F0, y, **dyn, lam_max=lam_theta * len(idx))
            plain_s = time.perf_counter() - t_plain
            fc.plain_forecast = Forecast(Lp, Ap, plain_s, kind, kernel.method, N, len(idx), kernel.n_params, kernel.seconds, variant="plain")
    if also_ode:
        t_ode = time.perf_counter()
        Lo, Ao = (L, A) if kind == "ode" else run_dynamics("ode", kernel.theta, F0, y, **dyn)
        ode_dyn_s = time.perf_counter() - t_ode
    if correction == "probe" and probe_fraction > 0 and steps > 1:
        k = min(steps - 1, max(1, math.ceil(probe_fraction * steps)))
        fc.probe_steps = k
        t_probe = time.perf_counter()
        probed = copy.deepcopy(model)
        from prenet.convergence.training import finetune

        res = finetune(
            probed,
            inputs,
            torch.as_tensor(y_all, device=inputs.device),
            loss=loss,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            steps=k,
            seed=seed,
            log_x=x,
            log_y=torch.as_tensor(y, device=inputs.device),
        )
        if res.diverged:
            if raise_on_probe_divergence:
                raise dynamics.DivergenceError(
                    f"the real fine-tuning diverged within the {k}-step probe at lr {lr:g} (momentum {momentum:g}): "
                    f"the network leaves its linear regime; lower lr or the momentum"
                )
            fc.drift, fc.reliable = float("inf"), False
        else:
            kernel_k = empirical_ntk(probed, x, method=kernel.method, proj_dim=proj_dim, seed=seed, max_bytes=max_bytes)
            fc.drift = relative_error(kernel_k.theta, kernel.theta)
            fc.reliable = fc.drift <= drift_threshold
            Fk = outputs(probed, x).double().cpu().numpy()
            Lk, Ak = run_dynamics(kind, kernel_k.theta, Fk, y, **{**dyn, "steps": steps - k, "seed": seed + 1})
            fc.corrected = Forecast(
                np.concatenate([res.loss[:-1], Lk]),
                np.concatenate([res.accuracy[:-1], Ak]),
                0.0,
                kind,
                kernel.method,
                N,
                len(idx),
                kernel.n_params,
                kernel.seconds + kernel_k.seconds,
                probe_steps=k,
                variant="corrected",
                plain_forecast=fc,
            )
        fc.details["probe_seconds"] = time.perf_counter() - t_probe
    fc.seconds = time.perf_counter() - t0 - (fc.plain_forecast.seconds if fc.plain_forecast is not None else 0.0)
    if also_ode:
        ode_s = (fc.seconds - fc.details.get("probe_seconds", 0.0)) if kind == "ode" else kernel.seconds + ode_dyn_s
        fc.ode = Forecast(Lo, Ao, ode_s, "ode", kernel.method, N, len(idx), kernel.n_params, kernel.seconds)
        if kind != "ode":
            fc.seconds -= ode_dyn_s  # the plain forecast's own cost excludes the optional ODE variant
    if cost:
        cost["ratio_estimate"] = cost["train_seconds_estimate"] / fc.seconds
        cost["met"] = cost["ratio_estimate"] >= cost_target
        fc.details["cost"] = cost
        if warn_dearer and cost["ratio_estimate"] < 1.0:  # the API says so, as the CLI's cost line does
            warnings.warn(
                f"the forecast took {fc.seconds:.2f} s, {1 / cost['ratio_estimate']:.1f}x the {cost['train_seconds_estimate']:.2f} s "
                f"the fine-tune itself would take here ({steps} steps; target {cost_target:g}x cheaper): at this size, training "
                "is the cheaper answer (details['cost'])",
                DearerWarning,
                stacklevel=2,
            )
    c = fc.corrected
    if c is None:
        return fc
    # the corrected variant carries the probe's verdict too; it answers when the probe flags the plain forecast
    c.seconds, c.drift, c.reliable, c.ode, c.details = fc.seconds, fc.drift, fc.reliable, fc.ode, dict(fc.details)
    if fc.reliable is False:
        c.corrected = c
        return c
    return fc
