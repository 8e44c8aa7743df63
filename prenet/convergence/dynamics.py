"""Training dynamics of the linearized network in function space (Zancato et al. 2020, §3).

State: the outputs F (N × C) on the N training samples; Θ (N·C × N·C) the empirical NTK at the pre-trained
weights; G(F) = ∂lᵢ/∂Fᵢ the per-sample loss gradients (``losses.grad``). Time t counts SGD steps; η is the
learning rate, m the heavy-ball momentum, η̃ = η / (1 − m) the effective learning rate, B the batch size.

* :func:`ode` — gradient flow dF/dt = −(η̃/N) Θ G(F). MSE: closed form through Θ = V Λ Vᵀ,
  F(t) − Y = V exp(−η̃ Λ t / N) Vᵀ (F₀ − Y). Cross-entropy: integrated with LSODA (SciPy) and the analytic
  Jacobian −(η̃/N) Θ · blockdiag(diag(pᵢ) − pᵢ pᵢᵀ).
* :func:`sde` — adds the mini-batch noise: Euler–Maruyama with dt = 1 step,
  F_{t+1} = F_t − (η̃/N) Θ G(F_t) + η̃ ξ_t (split into sub-steps of dt < 1 when η̃ λ_max(Θ)/N > 1.5,
  so that the explicit scheme stays stable), ξ_t ~ N(0, Σ(F_t) · (N_full − B) / (B (N_full − 1))), Σ the covariance
  over samples of the per-sample function-space updates gᵢ = Θ[:, i] Gᵢ (finite-population factor: batches are
  drawn without replacement). The loss is averaged over ``paths`` sample paths.
* :func:`linear_sgd` — the exact linearized model trained by mini-batch SGD with heavy-ball momentum on a
  given batch sequence: u_{t+1} = m u_t + (1/B) Σ_{i∈b_t} Θ[:, i] Gᵢ(F_t), F_{t+1} = F_t − η u_{t+1}
  (u = J·v is the momentum buffer mapped to function space; identical to ``torch.optim.SGD`` with
  dampening 0 applied to the linearized network).

On a subset of n < N samples the same equations run with Θ_n and n in place of N: Θ_n/n is a Monte-Carlo
(Nyström) estimate of the kernel operator Θ_N/N — its leading eigenvalues estimate λ_k(Θ_N)·n/N — so the
subset's loss estimates the full set's. ``n_full`` (the real N) still sets the noise's finite-population factor.

Every function returns ``(loss, accuracy)``: arrays of length steps + 1 (step 0 = the pre-trained outputs).
"""

from __future__ import annotations

import numpy as np

from prenet.convergence import losses


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
        out += [perm[i * b:(i + 1) * b] for i in range(per_epoch)]
    return out[:steps]


def effective_lr(lr: float, momentum: float) -> float:
    return lr / (1.0 - momentum)


def _curves(Fs: list[np.ndarray], Y: np.ndarray, y: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([losses.value(F, Y, kind) for F in Fs]), np.array([losses.accuracy(F, y) for F in Fs]))


def ode(theta: np.ndarray, F0: np.ndarray, y: np.ndarray, *, kind: str, lr: float, momentum: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Gradient flow at the effective learning rate, evaluated at t = 0, 1, …, steps."""
    n, c = F0.shape
    Y = losses.onehot(y, c)
    rate = effective_lr(lr, momentum) / n
    ts = np.arange(steps + 1, dtype=float)
    if kind == "mse":
        lam, V = np.linalg.eigh(theta)
        lam = np.clip(lam, 0.0, None)
        r0 = V.T @ (F0 - Y).reshape(-1)
        decay = np.exp(-rate * np.outer(ts, lam))            # (T, NC)
        R = (decay * r0) @ V.T                                # residuals (T, NC)
        Fs = [Y + R[i].reshape(n, c) for i in range(len(ts))]
        return _curves(Fs, Y, y, kind)
    from scipy.integrate import solve_ivp

    def rhs(_t: float, f: np.ndarray) -> np.ndarray:
        return -rate * (theta @ losses.grad(f.reshape(n, c), Y, kind).reshape(-1))

    theta3 = theta.reshape(n * c, n, c)

    def jac(_t: float, f: np.ndarray) -> np.ndarray:
        p = losses.softmax(f.reshape(n, c))
        H = np.einsum("ic,cd->icd", p, np.eye(c)) - np.einsum("ic,id->icd", p, p)   # blocks diag(pᵢ) − pᵢpᵢᵀ
        return -rate * np.einsum("aic,icd->aid", theta3, H).reshape(n * c, n * c)

    sol = solve_ivp(rhs, (0.0, float(steps)), F0.reshape(-1), method="LSODA", t_eval=ts, jac=jac, rtol=1e-6, atol=1e-8)
    if not sol.success:
        raise RuntimeError(f"LSODA failed: {sol.message}")
    Fs = [sol.y[:, i].reshape(n, c) for i in range(sol.y.shape[1])]
    return _curves(Fs, Y, y, kind)


def sde(theta: np.ndarray, F0: np.ndarray, y: np.ndarray, *, kind: str, lr: float, momentum: float, batch_size: int, steps: int,
        n_full: int | None = None, paths: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Euler–Maruyama on the SDE; the loss and accuracy averaged over ``paths`` sample paths."""
    n, c = F0.shape
    N = n_full or n
    B = min(batch_size, N)
    Y = losses.onehot(y, c)
    eta = effective_lr(lr, momentum)
    fpc = (N - B) / (B * max(N - 1, 1))          # variance of a without-replacement batch mean, per sample variance
    rng = np.random.default_rng(seed)
    # Euler–Maruyama sub-steps per SGD step keep dt · η̃ λ_max(Θ)/n ≤ 1.5 (explicit Euler is unstable above 2)
    stiffness = eta * float(np.linalg.eigvalsh(theta)[-1]) / n
    substeps = max(1, int(np.ceil(stiffness / 1.5)))
    dt = 1.0 / substeps
    F = np.repeat(F0.reshape(1, n, c), paths, axis=0)            # (paths, n, C)
    loss = np.zeros((steps + 1, paths))
    acc = np.zeros((steps + 1, paths))
    for t in range(steps + 1):
        with np.errstate(over="ignore", invalid="ignore"):
            for p in range(paths):
                loss[t, p] = losses.value(F[p], Y, kind) if np.isfinite(F[p]).all() else np.inf
                acc[t, p] = losses.accuracy(F[p], y)
        if t == steps or not np.isfinite(loss[t]).all():
            loss[t + 1:] = np.inf
            break
        for _ in range(substeps):
            G = losses.grad(F, Y[None], kind)                                   # (paths, n, C)
            # per-sample updates gᵢ = Θ[:, i] Gᵢ; their mean ḡ = Θ vec(G)/n and the noise
            # Σᵢ (gᵢ − ḡ) zᵢ / √n = (Θ vec(z ⊙ G) − ḡ Σᵢ zᵢ) / √n, both from one product with Θ
            z = rng.standard_normal((paths, n, 1)) if fpc > 0 else np.zeros((paths, n, 1))
            rhs = np.concatenate([G.reshape(paths, -1), (z * G).reshape(paths, -1)]).T  # (NC, 2·paths)
            prod = (theta @ rhs).T
            mean = prod[:paths] / n
            noise = (prod[paths:] - mean * z.sum(axis=(1, 2))[:, None]) / np.sqrt(n)
            F = F - (eta * dt * mean + eta * np.sqrt(fpc * dt) * noise).reshape(paths, n, c)
    return loss.mean(1), acc.mean(1)


def linear_sgd(theta: np.ndarray, F0: np.ndarray, y: np.ndarray, *, kind: str, lr: float, momentum: float,
               batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The linearized network trained by SGD (heavy-ball momentum) on the batch sequence ``batches``."""
    n, c = F0.shape
    Y = losses.onehot(y, c)
    F = F0.reshape(-1).copy()
    u = np.zeros_like(F)
    Gb = np.zeros((n, c))
    Fs = [F0]
    for b in batches:
        Gb[:] = 0.0
        Gb[b] = losses.grad(F.reshape(n, c)[b], Y[b], kind)          # (B, C) on the batch, zero elsewhere
        u = momentum * u + theta @ Gb.reshape(-1) / len(b)
        F = F - lr * u
        Fs.append(F.reshape(n, c).copy())
    return _curves(Fs, Y, y, kind)
