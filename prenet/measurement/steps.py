"""What one timed iteration of a layer does in each direction (see :mod:`prenet.layers.base`)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from prenet.optimizers import make_optimizer


def timed_optimizer(name: str, params) -> torch.optim.Optimizer | None:
    """The optimizer of a timed step (:func:`prenet.optimizers.make_optimizer` at its timing learning rate); ``none``:
    no optimizer step (``None``)."""
    return None if name == "none" else make_optimizer(name, params)


def make_step(module: nn.Module, x: torch.Tensor, direction: str, optimizer: str) -> Callable[[], None]:
    """A zero-argument callable running one iteration of ``direction`` on ``module`` with input ``x``."""
    if direction == "forward":
        module.eval()

        def forward() -> None:
            with torch.no_grad():
                module(x)

        return forward
    if direction not in ("forward_backward", "train_step"):
        raise ValueError(f"unknown direction {direction!r}; use forward, forward_backward or train_step")
    module.train()
    if x.is_floating_point():
        x = x.detach().requires_grad_(True)
    with torch.no_grad():
        grad_out = torch.randn_like(module(x))
    opt = timed_optimizer(optimizer, module.parameters()) if direction == "train_step" else None
    if direction == "train_step" and opt is None:
        raise ValueError("direction train_step needs an optimizer (sgd or adam)")

    def step() -> None:
        module.zero_grad(set_to_none=True)
        if x.requires_grad:
            x.grad = None
        module(x).backward(grad_out)
        if opt is not None:
            opt.step()

    return step


def unpack_example(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``example_batch`` is an input tensor or a tuple ``(inputs, labels)``."""
    from prenet.errors import PrenetError

    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch):
        return batch[0], batch[1]
    raise PrenetError(f"the example batch must be a tensor or a tuple (inputs, labels) of tensors, got {type(batch).__name__}")
