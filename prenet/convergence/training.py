"""Real fine-tuning: ``torch.optim.SGD`` (fixed learning rate, heavy-ball momentum, dampening 0, no weight
decay) over all parameters, batch norm and dropout in eval mode, on the batch schedule that
:func:`prenet.convergence.dynamics.batch_schedule` draws, logging the full-training-set loss and accuracy.

Wall time: ``train_seconds`` counts only the SGD steps (forward, backward, update); the logging passes over the
full training set are instrumentation and are excluded.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from prenet.convergence import losses
from prenet.convergence.dynamics import batch_schedule
from prenet.convergence.ntk import outputs


@dataclass
class FinetuneResult:
    """``loss``/``accuracy``: full-training-set values at ``logged_steps`` (step 0 = pre-trained weights)."""

    logged_steps: np.ndarray
    loss: np.ndarray
    accuracy: np.ndarray
    train_seconds: float
    diverged: bool


def finetune(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    loss: str,
    lr: float,
    momentum: float,
    batch_size: int,
    steps: int,
    seed: int,
    log_every: int = 1,
    log_x: torch.Tensor | None = None,
    log_y: torch.Tensor | None = None,
    log_steps: Sequence[int] | None = None,
) -> FinetuneResult:
    """Fine-tune ``model`` in place for ``steps`` steps. The loss is logged on (``log_x``, ``log_y``) — the
    training set by default — every ``log_every`` steps, or at ``log_steps`` when given (e.g. :func:`log_grid`), and at
    the last step. Stops early (``diverged``) when
    the loss becomes non-finite; the remaining logged values are ``inf``."""
    losses.check_loss(loss)
    model.eval()
    lx, ly = (x, y) if log_x is None else (log_x, log_y)
    yn = ly.cpu().numpy()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    logged, L, A = [], [], []
    view, vx = logging_view(model, lx)

    def log(step: int) -> bool:
        if view is not model:  # the trained weights, copied into the view's layout
            view.load_state_dict(model.state_dict())
        F = outputs(view, vx).double().cpu().numpy()
        Y = losses.onehot(yn, F.shape[1])
        val = losses.value(F, Y, loss) if np.isfinite(F).all() else float("inf")
        logged.append(step)
        L.append(val)
        A.append(losses.accuracy(F, yn) if np.isfinite(F).all() else 0.0)
        return bool(np.isfinite(val))

    wanted = set(int(s) for s in log_steps) if log_steps is not None else None
    log(0)
    seconds = 0.0
    diverged = False
    for t, b in enumerate(batch_schedule(len(x), batch_size, steps, seed), start=1):
        idx = torch.as_tensor(b, device=x.device)
        t0 = time.perf_counter()
        lv = sgd_step(model, opt, x[idx], y[idx], loss)
        seconds += time.perf_counter() - t0
        due = t in wanted if wanted is not None else t % log_every == 0
        if (due or t == steps) and not log(t):
            diverged = True
            break
        if not torch.isfinite(lv):
            diverged = True
            log(t)
            break
    if diverged:
        for t in range(logged[-1] + log_every, steps + 1, log_every):
            logged.append(t), L.append(float("inf")), A.append(0.0)
        if logged[-1] != steps:
            logged.append(steps), L.append(float("inf")), A.append(0.0)
    return FinetuneResult(np.array(logged), np.array(L), np.array(A), seconds, diverged)


def logging_view(model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """What the loss is logged with: for a convolutional ``model`` on image batches (4-D) on a CPU, a channels_last copy of ``model`` and ``x``
    (oneDNN's NHWC max pooling and convolutions: a 1,000-image Fashion-MNIST pass of the cost check's CNN 229 -> 123 ms
    on one thread, the outputs equal to 6e-8), so the instrumentation costs less than the SGD it logs; else ``model``
    and ``x`` themselves. The copy's weights are refreshed from ``model`` before each logging pass; the fine-tune's
    own steps, and their timing, are untouched."""
    if x.dim() != 4 or x.is_cuda or not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        return model, x
    return copy.deepcopy(model).to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)


def sgd_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """One fine-tuning step on the batch (``x``, ``y``): forward, ``loss``, backward, ``opt.step()`` (synchronised on a
    GPU, so a timer around it measures the step). Returns the batch loss."""
    opt.zero_grad(set_to_none=True)
    lv = losses.torch_loss(model(x), y, loss)
    lv.backward()
    opt.step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return lv


def log_grid(steps: int, points: int) -> np.ndarray:
    """About ``points`` logging steps in 1..``steps``: geometrically spaced, so the first steps, where the loss falls
    fastest, are resolved as finely as the last (a linear grid puts a target crossed within the first logging interval
    anywhere in it), plus ``steps``."""
    g = np.unique(np.round(np.geomspace(1, max(steps, 1), max(points, 2))).astype(int))
    return np.union1d(g, [steps])


def dense_curve(res: FinetuneResult, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Loss and accuracy at every step 0..steps (linear interpolation between logged steps)."""
    t = np.arange(steps + 1)
    return np.interp(t, res.logged_steps, res.loss), np.interp(t, res.logged_steps, res.accuracy)
