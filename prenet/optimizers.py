"""The one optimizer builder: every timed step, memory measurement and corpus run makes its optimizer here."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from prenet.errors import PrenetError
from prenet.names import FUSED_OPTIMIZERS, OPTIMIZERS

#: Learning rate of a *timed* step: tiny, so weights do not drift over thousands of timed iterations.
TIMING_LR = 1e-6
#: Weight decay of a timed or traced step: AdamW's default 0.01 (its decoupled decay is one more op per parameter);
#: none for the others (their L2 decay would be an op users often do not run).
STEP_WEIGHT_DECAY: dict[str, float] = {"adamw": 0.01}


def prime_state(name: str, optimizer: torch.optim.Optimizer) -> None:
    """Put ``optimizer`` in its steady state before a timed or traced step, as every step of a job after the first
    runs: SGD with momentum gets its buffers (the first step would copy the gradient instead of updating the buffer);
    Adam/AdamW get their step count and moment buffers as their first step creates them (else the traced step would
    carry two ``zeros_like`` per parameter that only the first step runs)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if name in ("momentum", "nesterov"):
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif name == "rmsprop":
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["momentum"] > 0:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif name in ("adam", "adamw"):
                on_device = group.get("fused") or group.get("capturable")
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device) if on_device else torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def make_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float = TIMING_LR,
    weight_decay: float = 0.0,
    foreach: bool | None = None,
    fused: bool | None = None,
    momentum: float = 0.9,
) -> torch.optim.Optimizer:
    """``sgd``: plain SGD; ``momentum``: SGD with heavy-ball ``momentum`` (0.9 unless given); ``nesterov``: the same
    with Nesterov's update; ``adam``: Adam (default betas, L2 weight decay); ``adamw``: AdamW (decoupled weight decay);
    ``rmsprop``: RMSprop (torch's α and ε) with heavy-ball ``momentum``, as EfficientNet and MobileNet train (torch's
    own default momentum is 0: one buffer and its passes fewer). ``lr`` is per step (default :data:`TIMING_LR`); ``foreach`` and ``fused`` as torch takes them (``None``: torch's
    own choice per device: foreach on CUDA, never fused)."""
    kw = {"lr": lr, "weight_decay": weight_decay, "foreach": foreach, "fused": fused}
    if name == "sgd":
        return torch.optim.SGD(params, **kw)
    if name == "momentum":
        return torch.optim.SGD(params, momentum=momentum, **kw)
    if name == "nesterov":
        return torch.optim.SGD(params, momentum=momentum, nesterov=True, **kw)
    if name == "adam":
        return torch.optim.Adam(params, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, **kw)
    if name == "rmsprop":
        if fused:
            raise PrenetError(f"torch has no fused RMSprop; drop --fused, or choose one of {', '.join(FUSED_OPTIMIZERS)}")
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay, foreach=foreach, momentum=momentum)
    raise PrenetError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
