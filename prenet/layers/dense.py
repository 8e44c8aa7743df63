"""Dense (``nn.Linear``) layers: input [batch, in_features] → [batch, out_features]."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prenet.layers.base import LayerCost, LayerType, cap, log_uniform_int, redraw, width


def sample(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    """Log-uniform batch and widths within ``space`` ranges (with ``powers_of_two``, widths rounded to powers of two:
    :func:`~prenet.layers.base.width`), rejecting configs above ``max_flops``."""
    pow2 = bool(space.get("powers_of_two"))
    return redraw(
        lambda: {
            "batch": log_uniform_int(rng, *space["batch"]),
            "in_features": width(rng, space["in_features"], pow2),
            "out_features": width(rng, space["out_features"], pow2),
        },
        lambda c: cost(c, 4).forward_flops <= cap(space, "max_flops"),
        f"dense space {space} admits no configuration under max_flops; raise max_flops",
    )


def build(cfg: dict[str, int], device: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    module = nn.Linear(cfg["in_features"], cfg["out_features"]).to(device=device, dtype=dtype)
    x = torch.randn(cfg["batch"], cfg["in_features"], device=device, dtype=dtype)
    return module, x


def cost(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """Forward FLOPs = 2·batch·in·out (multiply-adds; the bias add is not counted, as in
    ``torch.utils.flop_counter``)."""
    b, i, o = cfg["batch"], cfg["in_features"], cfg["out_features"]
    params = i * o + o
    return LayerCost(
        forward_flops=2.0 * b * i * o,
        params=params,
        weight_bytes=params * dtype_bytes,
        input_bytes=b * i * dtype_bytes,
        output_bytes=b * o * dtype_bytes,
    )


DENSE = LayerType(op="linear", shape_columns=("batch", "in_features", "out_features"), sample=sample, build=build, cost=cost)
