"""Training dynamics of the linearized network in function space (Zancato et al. 2020, §3).

State: the outputs F (N × C) on the N training samples; Θ (N·C × N·C) the empirical NTK at the pre-trained
weights; G(F) = ∂lᵢ/∂Fᵢ the per-sample loss gradients (``losses.grad``). Time t counts SGD steps; η is the
learning rate, m the heavy-ball momentum, η̃ = η / (1 − m) the effective learning rate, B the batch size.

* :func:`ode` — the deterministic (full-batch) dynamics. Without momentum the gradient flow
  dF/dt = −(η/N) Θ G(F). With heavy-ball momentum m > 0 the second-order system the update
  F_{t+1} − F_t = m (F_t − F_{t−1}) − (η/N) Θ G(F_t) is approximated by the second-order system
  m F'' + (1 − m) F' = −(η/N) Θ G(F), F'(0) = 0 (first order in the step; the modified equation's coefficient of F''
  is (1 + m)/2, which matched exact momentum GD no better on the modes tested, while m keeps m = 0 the gradient flow) — the velocity builds up over ~1/(1 − m) steps and only then
  moves F at the effective rate η/(1 − m) (the η/(1 − m) shortcut skips that build-up and reaches every target
  about twice as early at m = 0.9). MSE: closed form per eigenmode of Θ = V Λ Vᵀ (a damped oscillator
  m r'' + (1 − m) r' + (ηλ/N) r = 0). Cross-entropy: LSODA (SciPy) with the analytic Jacobian, through
  −(η/N) Θ · blockdiag(diag(pᵢ) − pᵢ pᵢᵀ).
* :func:`sde` — adds the mini-batch noise, ξ_t ~ N(0, Σ(F_t) · (N_full − B) / (B (N_full − 1))), Σ the covariance
  over samples of the per-sample function-space updates gᵢ = Θ[:, i] Gᵢ (finite-population factor: batches are
  drawn without replacement). Without momentum: Euler–Maruyama with dt = 1 step — the discrete SGD map itself, as
  the real fine-tune runs it — split into sub-steps only near that map's stability edge: when h · η λ_max(Θ)/N > 1.5,
  h the loss's largest curvature in the outputs (1 for MSE, ½ for cross-entropy: diag(p) − ppᵀ ≤ ½; the map
  diverges above 2), at most ``MAX_SUBSTEPS``. With momentum the velocity
  is carried: u_{t+1} = m u_t + (Θ G(F_t)/N + ξ_t), F_{t+1} = F_t − η u_{t+1}, one step per SGD step (the
  discrete heavy-ball is stable exactly when the real linearized SGD is: η λ_max/N < 2 (1 + m)).
  The loss is averaged over ``paths`` sample paths.
* :func:`linear_sgd` — the exact linearized model trained by mini-batch SGD with heavy-ball momentum on a
  given batch sequence: u_{t+1} = m u_t + (1/B) Σ_{i∈b_t} Θ[:, i] Gᵢ(F_t), F_{t+1} = F_t − η u_{t+1}
  (u = J·v is the momentum buffer mapped to function space; identical to ``torch.optim.SGD`` with
  dampening 0 applied to the linearized network). :func:`exact_sgd` averages it over seeded batch orders: the
  ``forecast`` default when the kernel covers all N samples and N·C ≤ ``EXACT_MAX_NC`` (its per-step cost is
  N·C × B·C against the SDE's N·C × N·C, and it has no continuous-time approximation at all).

On a subset of n < N samples the same equations run with Θ_n and n in place of N: Θ_n/n is a Monte-Carlo
(Nyström) estimate of the kernel operator Θ_N/N — its leading eigenvalues estimate λ_k(Θ_N)·n/N — so the
subset's loss estimates the full set's. ``n_full`` (the real N) still sets the noise's finite-population factor.

Every function returns ``(loss, accuracy)``: arrays of length steps + 1 (step 0 = the pre-trained outputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prenet.convergence import losses
from prenet.errors import PrenetError

#: Largest N·C for which ``forecast`` runs :func:`exact_sgd` (the exact linearized SGD over batch orders) by default.
EXACT_MAX_NC = 2048
#: Cap on the Euler–Maruyama sub-steps per SGD step of the momentum-free SDE (a stiffer problem is on the edge of
#: divergence, which ``forecast`` decides up front).
MAX_SUBSTEPS = 16
#: Where :func:`cap_at_edge` puts a capped eigenvalue: just inside the stability edge, where the heavy-ball map still
#: contracts (exactly at the edge its characteristic roots are −1 and −m: an MSE mode would oscillate undamped).
EDGE_MARGIN = 0.95
#: Noise values the SDE draws at once (a block of steps × sub-steps × paths × samples: 8 MB of float64).
NOISE_BLOCK_VALUES = 2**20
#: The loss's largest curvature in the network outputs (the top eigenvalue of ∂²l/∂F²): MSE's is the identity;
#: softmax cross-entropy's diag(p) − ppᵀ has eigenvalues ≤ ½. A discrete gradient step on Θ is stable while
#: curvature · η λ_max(Θ)/N < 2.
CURVATURE = {"mse": 1.0, "cross_entropy": 0.5}


class DivergenceError(PrenetError):
    """The linearized dynamics are unstable at this learning rate: real fine-tuning would diverge."""


def top_eigenvalue(matvec, size: int) -> float:
    """The largest eigenvalue of a symmetric PSD operator given by ``matvec`` (Lanczos, SciPy's ``eigsh``)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    if size <= 64:
        return float(np.linalg.eigvalsh(np.column_stack([matvec(e) for e in np.eye(size)]))[-1])
    op = LinearOperator((size, size), matvec=matvec, dtype=float)
    return float(eigsh(op, k=1, which="LA", tol=1e-6, v0=lanczos_start(size), return_eigenvectors=False)[0])


def lanczos_start(size: int) -> np.ndarray:
    """A seeded starting vector for ARPACK (``eigsh``): without one it draws its own, and a forecast whose kernel is
    capped at the stability edge came out different in every process (loss at step 600 of the relabel check 0.44-1.29)."""
    return np.random.default_rng(0).standard_normal(size)


def stability_edge(n: int, *, lr: float, momentum: float, kind: str) -> float:
    """The largest eigenvalue of Θ (n samples) at which the linearized SGD map (heavy-ball ``momentum``) stays stable
    at the loss's largest output curvature h (:data:`CURVATURE`): h · η λ / n < 2 (1 + m), the bound of
    :func:`max_stable_lr` read for λ instead of η."""
    return max_stable_lr(lr * CURVATURE[kind] / n, momentum)


@dataclass(frozen=True)
class EdgeCap:
    """The eigen-directions of a kernel capped at the stability edge by :func:`cap_at_edge`: ``edge`` (the cap, in Θ's
    units), their eigenvectors ``vectors`` (n·C × k) and ``shrink`` = 1 − edge/λ per direction (k,)."""

    edge: float
    vectors: np.ndarray
    shrink: np.ndarray

    def weight_coefficients(self, D: np.ndarray) -> np.ndarray:
        """The coefficients D' with Θ D' = Θ_capped D: the weights move by −Jᵀ D' as the outputs move by −Θ_capped D
        (D' = D − V diag(shrink) Vᵀ D, exact since the capped directions are Θ's eigenvectors); ``D`` (n·C) or one row
        per path (paths × n·C), e.g. the SDE's velocity coefficients."""
        return D - ((D @ self.vectors) * self.shrink) @ self.vectors.T


def cap_at_edge(
    theta: np.ndarray, n: int, *, lr: float, momentum: float, kind: str, lam_max: float | None = None
) -> tuple[np.ndarray, EdgeCap | None]:
    """``theta`` (n samples) with its eigenvalues above ``EDGE_MARGIN`` × :func:`stability_edge` lowered to that, and
    which directions were (None, and ``theta`` itself, when none pass it; ``lam_max``: its largest eigenvalue, when
    known). Real training does not follow a kernel past that edge: its sharpness rises to 2 (1 + m)/η and stays there
    (the edge of stability, Cohen et al., ICLR 2021), while the linearized map there oscillates with a growing
    amplitude (a re-linearized kernel of the 30,000-sample relabel check at m = 0.9 had h · η λ_max / n = 23 against
    the edge 3.8, and its forecast loss jumped from 0.5 to 4.4 nats). Only the few top directions pass it: found by
    Lanczos (SciPy's ``eigsh``), 8 at a time, doubling until one falls below the edge; all eigenpairs directly where
    that would be most of them or Lanczos does not converge."""
    edge = EDGE_MARGIN * stability_edge(n, lr=lr, momentum=momentum, kind=kind)
    size = theta.shape[0]
    top = top_eigenvalue(lambda v: theta @ v, size) if lam_max is None else lam_max
    if top <= edge:
        return theta, None
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    lam, V, k = None, None, 8
    while lam is None and 2 * k < size:
        try:
            lam, V = eigsh(theta, k=k, which="LA", tol=1e-8, v0=lanczos_start(size))
        except ArpackNoConvergence:
            break
        if lam.min() > edge:  # all k past the edge: more
            lam, k = None, 2 * k
    if lam is None:
        lam, V = np.linalg.eigh(theta)
    over = lam > edge
    if not over.any():  # the top eigenvalue's estimate was a hair above it
        return theta, None
    lam, V = lam[over], V[:, over]
    return theta - (V * (lam - edge)) @ V.T, EdgeCap(edge, V, 1.0 - edge / lam)


def max_stable_lr(lam_max_over_n: float, momentum: float) -> float:
    """The linearized stability bound of gradient descent with heavy-ball momentum m: a mode of rate a = η λ/N (λ an
    eigenvalue of Θ for MSE, of H^½ Θ H^½ for cross-entropy) is stable iff a < 2 (1 + m), so the largest stable
    learning rate is 2 (1 + m) N / λ_max."""
    return 2.0 * (1.0 + momentum) / max(lam_max_over_n, 1e-300)


def check_stable(theta: np.ndarray, F0: np.ndarray, *, kind: str, lr: float, momentum: float) -> tuple[float, float]:
    """(λ_max(Θ)/n, λ_max of the dynamics' Jacobian scale /n) at the starting outputs ``F0``; raises
    :class:`DivergenceError` (with the largest stable learning rate) when an MSE fine-tune's ``lr`` breaks the stability
    bound — decided before any dynamics run. The bound is that of the mean (full-batch) dynamics: for MSE it holds
    everywhere (above it the linearized loss grows without limit). For cross-entropy the curvature
    H = blockdiag(diag pᵢ − pᵢpᵢᵀ) at ``F0`` gives only the learning rate above which the first steps oscillate: H
    shrinks as the predictions sharpen and the gradients stay bounded, so real and linearized training recover (a
    CNN fine-tune measured 2026-11-30 trained fine at 5× this bound); nothing is refused, the bound is reported
    (``details["max_stable_lr"]``). Mini-batch noise can destabilise a run below the MSE bound."""
    n, c = F0.shape
    lam_theta = top_eigenvalue(lambda v: theta @ v, n * c) / n
    if kind == "mse":
        lam = lam_theta
    else:
        w, U = np.linalg.eigh(losses.ce_hessian_blocks(F0))  # per-sample C×C blocks
        Hs = np.einsum("icd,id,ied->ice", U, np.sqrt(np.clip(w, 0, None)), U)  # H^½ per block

        def hs(v: np.ndarray) -> np.ndarray:
            return np.einsum("icd,id->ic", Hs, v.reshape(n, c)).reshape(-1)

        lam = top_eigenvalue(lambda v: hs(theta @ hs(v)), n * c) / n
    bound = max_stable_lr(lam, momentum)
    if kind == "mse" and lr >= bound:  # cross-entropy's curvature shrinks as predictions sharpen: no divergence to refuse
        what = "λ_max(Θ)/N" if kind == "mse" else "λ_max(H^½ Θ H^½)/N (H: the cross-entropy curvature at the starting outputs)"
        raise DivergenceError(
            f"lr {lr:g} diverges: the linearized gradient descent (momentum {momentum:g}) is stable only for lr · {what} < 2 (1 + m), "
            f"here {lam:.4g}; the largest stable lr is {bound:.4g} — lower --lr below it"
        )
    return lam_theta, lam


def progress_bar(total: int, desc: str, enabled: bool):
    """A progress bar on stderr that appears only when the loop runs longer than 3 s (``tqdm``'s ``delay``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", delay=3.0, disable=not enabled, leave=False)


def batch_schedule(n: int, batch_size: int, steps: int, seed: int) -> list[np.ndarray]:
    """The sample indices of each step: epochs of a seeded permutation, consecutive batches, the last partial
    batch of an epoch dropped (so every step sees exactly ``batch_size`` samples). Real fine-tuning and
    :func:`linear_sgd` use the same schedule."""
    b = min(batch_size, n)
    rng = np.random.default_rng(seed)
    per_epoch = n // b
    out: list[np.ndarray] = []
    while len(out) < steps:
        perm = rng.permutation(n)
        out += [perm[i * b : (i + 1) * b] for i in range(per_epoch)]
    return out[:steps]


def effective_lr(lr: float, momentum: float) -> float:
    return lr / (1.0 - momentum)


def _curves(Fs: list[np.ndarray], Y: np.ndarray, y: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([losses.value(F, Y, kind) for F in Fs]), np.array([losses.accuracy(F, y) for F in Fs]))


def heavy_ball_decay(a: np.ndarray, momentum: float, ts: np.ndarray) -> np.ndarray:
    """r(t)/r(0) of the mode equation m r'' + (1 − m) r' + a r = 0 with r'(0) = 0, for every rate ``a`` (= ηλ/N, per
    step) at times ``ts``: (T, len(a)). m = 0: exp(−a t)."""
    a = np.asarray(a, dtype=float)
    t = np.asarray(ts, dtype=float)[:, None]
    if momentum == 0:
        return np.exp(-t * a[None])
    m = float(momentum)
    disc = np.sqrt(((1 - m) ** 2 - 4 * m * a).astype(complex))
    s1, s2 = (-(1 - m) + disc) / (2 * m), (-(1 - m) - disc) / (2 * m)
    close = np.abs(disc) < 1e-9
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        distinct = (s2 * np.exp(s1 * t) - s1 * np.exp(s2 * t)) / np.where(close, 1.0, s2 - s1)
    s0 = -(1 - m) / (2 * m)
    critical = (1 - s0 * t) * np.exp(s0 * t)
    return np.where(close[None], critical, distinct.real)


def ode(theta: np.ndarray, F0: np.ndarray, y: np.ndarray, *, kind: str, lr: float, momentum: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The full-batch dynamics (gradient flow, or the heavy-ball second-order system when ``momentum`` > 0), evaluated
    at t = 0, 1, …, steps."""
    n, c = F0.shape
    Y = losses.onehot(y, c)
    rate = lr / n
    m = float(momentum)
    ts = np.arange(steps + 1, dtype=float)
    if kind == "mse":
        lam, V = np.linalg.eigh(theta)
        lam = np.clip(lam, 0.0, None)
        r0 = V.T @ (F0 - Y).reshape(-1)
        R = (heavy_ball_decay(rate * lam, m, ts) * r0) @ V.T  # residuals (T, NC)
        Fs = [Y + R[i].reshape(n, c) for i in range(len(ts))]
        return _curves(Fs, Y, y, kind)
    from scipy.integrate import solve_ivp

    nc = n * c
    theta3 = theta.reshape(nc, n, c)

    def force(f: np.ndarray) -> np.ndarray:
        return -rate * (theta @ losses.grad(f.reshape(n, c), Y, kind).reshape(-1))

    def force_jac(f: np.ndarray) -> np.ndarray:
        H = losses.ce_hessian_blocks(f.reshape(n, c))
        return -rate * np.einsum("aic,icd->aid", theta3, H).reshape(nc, nc)

    if m == 0:
        rhs, jac, z0 = (lambda _t, f: force(f)), (lambda _t, f: force_jac(f)), F0.reshape(-1)
    else:

        def rhs(_t: float, z: np.ndarray) -> np.ndarray:  # z = (F, F')
            return np.concatenate([z[nc:], (force(z[:nc]) - (1 - m) * z[nc:]) / m])

        def jac(_t: float, z: np.ndarray) -> np.ndarray:
            J = np.zeros((2 * nc, 2 * nc))
            J[:nc, nc:] = np.eye(nc)
            J[nc:, :nc] = force_jac(z[:nc]) / m
            J[nc:, nc:] = -(1 - m) / m * np.eye(nc)
            return J

        z0 = np.concatenate([F0.reshape(-1), np.zeros(nc)])
    sol = solve_ivp(rhs, (0.0, float(steps)), z0, method="LSODA", t_eval=ts, jac=jac, rtol=1e-6, atol=1e-8)
    if not sol.success:
        raise RuntimeError(f"LSODA failed: {sol.message}")
    Fs = [sol.y[:nc, i].reshape(n, c) for i in range(sol.y.shape[1])]
    return _curves(Fs, Y, y, kind)


@dataclass
class SDEState:
    """The SDE's state between segments: ``F`` the outputs of each sample path (paths, n, C) and ``u`` the velocity
    (momentum buffer) of each path in coefficient space (paths, n·C): the function-space velocity is Θ u. At a
    re-linearization the coefficients are kept and the new kernel maps them (Θ_new u); the weight-space velocity
    J_oldᵀ u is so approximated by J_newᵀ u, and each path keeps its linearized outputs rather than the network's outputs
    at the moved weights (both approximations, exact while the kernel stays)."""

    F: np.ndarray
    u: np.ndarray
    uf: np.ndarray | None = None  # the function-space velocity Θ u, where a segment keeps it (exact_segment)

    @staticmethod
    def start(F0: np.ndarray, paths: int) -> "SDEState":
        n, c = F0.shape
        return SDEState(np.repeat(F0.reshape(1, n, c), paths, axis=0), np.zeros((paths, n * c)))

    def rekernel(self, theta: np.ndarray) -> None:
        """Carry the weight-space velocity onto a new kernel ``theta`` (re-linearization)."""
        if self.uf is not None:
            self.uf = self.u @ theta  # Θ symmetric: (Θ uᵀ)ᵀ


def sde_segment(
    theta: np.ndarray,
    state: SDEState,
    y: np.ndarray,
    *,
    kind: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    n_full: int,
    rng: np.random.Generator,
    lam_max: float | None = None,
    bar=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Advance ``state`` (in place) by ``steps`` SGD steps of the SDE on kernel ``theta``. Returns the loss and accuracy
    of each path at the segment's steps 0..steps−1 ((steps, paths) each) and the path-mean displacement in coefficient
    space D (n·C): the outputs moved by −Θ D and the weights of the linearized network by −Jᵀ D.

    Every update is formed as coefficients, then multiplied by Θ once: the mean force is Θ vec(G)/n and the noise
    Σᵢ (gᵢ − ḡ) zᵢ / √n = Θ (vec(z ⊙ G) − vec(G) Σᵢ zᵢ / n) / √n."""
    paths, n, c = state.F.shape
    N = n_full
    B = min(batch_size, N)
    Y = losses.onehot(y, c)
    m = float(momentum)
    fpc = (N - B) / (B * max(N - 1, 1))  # variance of a without-replacement batch mean, per sample variance
    # one step per SGD step, the discrete map SGD runs (with momentum, the discrete heavy-ball); without momentum,
    # sub-steps keep dt · h · η λ_max(Θ)/n ≤ 1.5 where the map nears its stability edge (2), h = the loss's largest
    # output curvature (CURVATURE): on a subset the self-terms can lift λ_max(Θ_n)/n above the real SGD's edge.
    # Sub-stepping a stable map only moves it towards gradient flow, which SGD is not (and costs a product with Θ each)
    stiffness = CURVATURE[kind] * lr * (lam_max if lam_max is not None else top_eigenvalue(lambda v: theta @ v, n * c)) / n
    substeps = 1 if m > 0 else min(MAX_SUBSTEPS, max(1, int(np.ceil(stiffness / 1.5))))
    dt = 1.0 / substeps
    theta32 = theta.astype(np.float32)  # the product with Θ in float32: ~2.5x faster on CPU; F accumulates in float64
    F, u = state.F, state.u
    loss = np.full((steps, paths), np.inf)
    acc = np.zeros((steps, paths))
    D = np.zeros(n * c)
    # each update is G3 ⊙ w, one weight per (path, sample): the mean force 1/n plus the noise (z − z̄)/√n ·√fpc, z ~ N(0, 1)
    # per sample, drawn for a block of steps at once (the same stream as one draw per sub-step)
    scale = 1.0 if m > 0 else lr * dt  # with momentum the weights feed the velocity, which the step multiplies by lr
    noise_scale = np.sqrt(fpc) if m > 0 else lr * np.sqrt(fpc * dt)
    block = max(1, NOISE_BLOCK_VALUES // (substeps * paths * n))
    for t in range(steps):
        if t % block == 0:  # the next block's weights
            rows = min(block, steps - t)
            if fpc > 0:
                z = rng.standard_normal((rows, substeps, paths, n, 1))
                w = scale / n + noise_scale * (z - z.mean(axis=3, keepdims=True)) / np.sqrt(n)
            else:
                w = np.full((rows, substeps, 1, 1, 1), scale / n)
        if bar is not None:
            bar.update(1)
        loss[t], acc[t], G3 = _values_grads(F, Y, y, kind)
        if not np.isfinite(loss[t]).all():
            break
        for k in range(substeps):
            if k:
                G3 = losses.grad(F, Y[None], kind)
            if m > 0:
                u = m * u + (G3 * w[t % block, k]).reshape(paths, -1)
                step = lr * u
            else:
                step = (G3 * w[t % block, k]).reshape(paths, -1)
            F = F - (step.astype(np.float32) @ theta32).astype(np.float64).reshape(paths, n, c)  # Θ symmetric: (Θ stepᵀ)ᵀ
            D += step.mean(axis=0)
    state.F, state.u = F, u
    return loss, acc, D


def path_values(state: SDEState, y: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Loss and accuracy of each path at ``state`` ((paths,) each; inf where a path is not finite)."""
    return _values(state.F, losses.onehot(y, state.F.shape[2]), y, kind)


def path_means(L: np.ndarray, A: np.ndarray, state: SDEState, y: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The path-mean curves (steps + 1): the segment's rows ``L``, ``A`` (steps, paths) and the final state's values."""
    Lf, Af = path_values(state, y, kind)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.vstack([L, Lf[None]]).mean(1), np.vstack([A, Af[None]]).mean(1)


def _values(F: np.ndarray, Y: np.ndarray, y: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Loss (inf where a path is not finite) and accuracy of each path of ``F`` (paths, n, C)."""
    return _values_grads(F, Y, y, kind, grads=False)[:2]


def _values_grads(F: np.ndarray, Y: np.ndarray, y: np.ndarray, kind: str, *, grads: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_values`, and the per-sample loss gradients of each path (paths, n, C; None unless ``grads``) from the
    same softmax. A path is finite where all its outputs are."""
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(F).all(axis=(1, 2))
        L, G = losses.values_and_grads(F, Y[None], kind, grads=grads)
        return np.where(finite, L, np.inf), losses.accuracies(F, y), G


def sde(
    theta: np.ndarray,
    F0: np.ndarray,
    y: np.ndarray,
    *,
    kind: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    n_full: int | None = None,
    paths: int = 8,
    seed: int = 0,
    progress: bool = False,
    lam_max: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Euler–Maruyama on the SDE; the loss and accuracy averaged over ``paths`` sample paths."""
    state = SDEState.start(F0, paths)
    with progress_bar(steps, "forecast (SDE)", progress) as bar:
        L, A, _ = sde_segment(
            theta,
            state,
            y,
            kind=kind,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            steps=steps,
            n_full=n_full or F0.shape[0],
            rng=np.random.default_rng(seed),
            lam_max=lam_max,
            bar=bar,
        )
    return path_means(L, A, state, y, kind)


def exact_segment(
    theta: np.ndarray,
    state: SDEState,
    y: np.ndarray,
    *,
    kind: str,
    lr: float,
    momentum: float,
    batches: list[list[np.ndarray]],
    bar=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Advance ``state`` (in place) by the exact linearized SGD of each path on its own batch sequence
    (``batches[p]``, one array of sample indices per step; :func:`linear_sgd` run in lockstep). Returns the loss and
    accuracy of each path at the segment's steps 0..steps−1 ((steps, paths)) and the path-mean displacement in
    coefficient space D (n·C) as :func:`sde_segment` does. The outputs move through the batch's rows of Θ only; the
    coefficient velocity is kept beside them for the weights."""
    paths, n, c = state.F.shape
    Y = losses.onehot(y, c)
    steps = len(batches[0])
    F = state.F.reshape(paths, n * c)
    u = state.u
    uf = np.zeros_like(u) if state.uf is None else state.uf
    cls = np.arange(c)
    loss = np.full((steps, paths), np.inf)
    acc = np.zeros((steps, paths))
    D = np.zeros(n * c)
    for t in range(steps):
        if bar is not None:
            bar.update(1)
        loss[t], acc[t] = _values(F.reshape(paths, n, c), Y, y, kind)
        if not np.isfinite(loss[t]).all():
            break
        u = momentum * u
        uf = momentum * uf
        for p in range(paths):
            b = batches[p][t]
            Gb = losses.grad(F[p].reshape(n, c)[b], Y[b], kind).reshape(-1) / len(b)  # (B·C,)
            rows = (b[:, None] * c + cls).reshape(-1)  # the batch's rows of Θ (symmetric: contiguous reads)
            u[p, rows] += Gb
            uf[p] += Gb @ theta[rows]
        F = F - lr * uf
        D += lr * u.mean(axis=0)
    state.F, state.u, state.uf = F.reshape(paths, n, c), u, uf
    return loss, acc, D


def linear_sgd(
    theta: np.ndarray, F0: np.ndarray, y: np.ndarray, *, kind: str, lr: float, momentum: float, batches: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The linearized network trained by SGD (heavy-ball momentum) on the batch sequence ``batches`` (one path of
    :func:`exact_segment`)."""
    state = SDEState.start(F0, 1)
    L, A, _ = exact_segment(theta, state, y, kind=kind, lr=lr, momentum=momentum, batches=[list(batches)])
    return path_means(L, A, state, y, kind)


def exact_sgd(
    theta: np.ndarray,
    F0: np.ndarray,
    y: np.ndarray,
    *,
    kind: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    paths: int = 8,
    seed: int = 0,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`linear_sgd` averaged over ``paths`` seeded batch orders (:func:`batch_schedule`): the expected curve of the
    exact linearized SGD, for a kernel on all N samples."""
    state = SDEState.start(F0, paths)
    with progress_bar(steps, "forecast (exact linearized SGD)", progress) as bar:
        L, A, _ = exact_segment(
            theta, state, y, kind=kind, lr=lr, momentum=momentum, batches=path_batches(F0.shape[0], batch_size, steps, seed, paths), bar=bar
        )
    return path_means(L, A, state, y, kind)


def path_batches(n: int, batch_size: int, steps: int, seed: int, paths: int) -> list[list[np.ndarray]]:
    """The batch sequence of each of ``paths`` seeded batch orders (:func:`batch_schedule`)."""
    return [batch_schedule(n, batch_size, steps, seed + 7919 * p) for p in range(paths)]
