"""Row-wise and element-wise layers on a [batch, hidden] input: activations, dropout, residual add, softmax,
cross-entropy and layer norm. A tensor of any shape maps onto them as batch = first dimension,
hidden = product of the others (what the model walker does).

FLOPs per element are conventional estimates (``torch.utils.flop_counter`` counts none for these ops); what
dominates their time is memory traffic, which the byte features carry.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from prenet.layers.base import LayerCost, LayerType, cap, log_uniform_int, redraw

SHAPE = ("batch", "hidden")


class ResidualAdd(nn.Module):
    """``x + skip``: the residual connection of a block (``skip`` a fixed tensor of the same shape)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.register_buffer("skip", torch.randn(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.skip


class Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class CrossEntropy(nn.Module):
    """Mean cross-entropy of logits [batch, classes] against fixed labels: the loss at the end of a step."""

    def __init__(self, batch: int, classes: int):
        super().__init__()
        self.register_buffer("labels", torch.randint(0, classes, (batch,)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, self.labels)


def sample(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    """Log-uniform batch and hidden, redrawn while batch·hidden exceeds ``max_elements``."""
    return redraw(
        lambda: {"batch": log_uniform_int(rng, *space["batch"]), "hidden": log_uniform_int(rng, *space["hidden"])},
        lambda c: c["batch"] * c["hidden"] <= cap(space, "max_elements"),
        f"space {space} admits no configuration under max_elements",
    )


def _make(
    op: str,
    module: Callable[[int, int], nn.Module],
    flops_per_element: float,
    weights: Callable[[int], int] = lambda h: 0,
    scalar_output: bool = False,
) -> LayerType:
    def build(cfg: dict[str, int], device: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
        b, h = cfg["batch"], cfg["hidden"]
        return module(b, h).to(device=device, dtype=dtype), torch.randn(b, h, device=device, dtype=dtype)

    def cost(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
        n = cfg["batch"] * cfg["hidden"]
        p = weights(cfg["hidden"])
        return LayerCost(
            forward_flops=flops_per_element * n,
            params=p,
            weight_bytes=p * dtype_bytes,
            input_bytes=n * dtype_bytes,
            output_bytes=(1 if scalar_output else n) * dtype_bytes,
        )

    return LayerType(op=op, shape_columns=SHAPE, sample=sample, build=build, cost=cost, trainable=weights(1) > 0)


RELU = _make("relu", lambda b, h: nn.ReLU(), 1)
GELU = _make("gelu", lambda b, h: nn.GELU(), 8)
TANH = _make("tanh", lambda b, h: nn.Tanh(), 4)
SIGMOID = _make("sigmoid", lambda b, h: nn.Sigmoid(), 4)
DROPOUT = _make("dropout", lambda b, h: nn.Dropout(0.1), 2)
ADD = _make("add", lambda b, h: ResidualAdd((b, h)), 1)
SOFTMAX = _make("softmax", lambda b, h: Softmax(), 5)
CROSS_ENTROPY = _make("cross_entropy", lambda b, h: CrossEntropy(b, h), 6, scalar_output=True)
LAYERNORM = _make("layernorm", lambda b, h: nn.LayerNorm(h), 8, weights=lambda h: 2 * h)

ELEMENTWISE = (RELU, GELU, TANH, SIGMOID, DROPOUT, ADD, SOFTMAX, CROSS_ENTROPY, LAYERNORM)
