"""Layers on [batch, channels, input_size, input_size] feature maps other than convolution: batch norm,
max and average pooling (square kernel, no padding)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prenet.layers.base import LayerCost, LayerType, cap, log_uniform_int, redraw


def _pool_out(cfg: dict[str, int]) -> int:
    return (cfg["input_size"] - cfg["kernel_size"]) // cfg["stride"] + 1


def sample_bn(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    return redraw(
        lambda: {
            "batch": log_uniform_int(rng, *space["batch"]),
            "channels": log_uniform_int(rng, *space["channels"]),
            "input_size": log_uniform_int(rng, *space["input_size"]),
        },
        lambda c: c["batch"] * c["channels"] * c["input_size"] ** 2 <= cap(space, "max_elements"),
        f"space {space} admits no configuration under max_elements",
    )


def sample_pool(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    def draw() -> dict[str, int]:
        return {**sample_bn(rng, space), "kernel_size": int(rng.choice(space["kernel_size"])), "stride": int(rng.choice(space["stride"]))}

    return redraw(draw, lambda c: _pool_out(c) >= 1, f"space {space} admits no pooling configuration")


def _input(cfg: dict[str, int], device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(cfg["batch"], cfg["channels"], cfg["input_size"], cfg["input_size"], device=device, dtype=dtype)


def build_bn(cfg, device, dtype):
    return nn.BatchNorm2d(cfg["channels"]).to(device=device, dtype=dtype), _input(cfg, device, dtype)


def cost_bn(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """About 8 FLOPs per element (mean, variance, normalize, scale and shift)."""
    n = cfg["batch"] * cfg["channels"] * cfg["input_size"] ** 2
    p = 2 * cfg["channels"]
    return LayerCost(forward_flops=8.0 * n, params=p, weight_bytes=p * dtype_bytes, input_bytes=n * dtype_bytes, output_bytes=n * dtype_bytes)


def _pool_builder(cls):
    def build(cfg, device, dtype):
        return cls(cfg["kernel_size"], stride=cfg["stride"]).to(device=device), _input(cfg, device, dtype)

    return build


def cost_pool(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """One compare or add per window element of each output."""
    o = _pool_out(cfg)
    out = cfg["batch"] * cfg["channels"] * o * o
    inp = cfg["batch"] * cfg["channels"] * cfg["input_size"] ** 2
    return LayerCost(
        forward_flops=float(out * cfg["kernel_size"] ** 2), params=0, weight_bytes=0, input_bytes=inp * dtype_bytes, output_bytes=out * dtype_bytes
    )


BATCHNORM2D = LayerType(op="batchnorm2d", shape_columns=("batch", "channels", "input_size"), sample=sample_bn, build=build_bn, cost=cost_bn)
_POOL_COLS = ("batch", "channels", "input_size", "kernel_size", "stride")
MAXPOOL2D = LayerType(
    op="maxpool2d",
    shape_columns=_POOL_COLS,
    sample=sample_pool,
    build=_pool_builder(nn.MaxPool2d),
    cost=cost_pool,
    trainable=False,
    derived_columns=("output_size",),
    derive=lambda cfg: {"output_size": _pool_out(cfg)},
)
AVGPOOL2D = LayerType(
    op="avgpool2d",
    shape_columns=_POOL_COLS,
    sample=sample_pool,
    build=_pool_builder(nn.AvgPool2d),
    cost=cost_pool,
    trainable=False,
    derived_columns=("output_size",),
    derive=lambda cfg: {"output_size": _pool_out(cfg)},
)
