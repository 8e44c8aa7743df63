"""2-D convolutions (``nn.Conv2d``, square input and kernel): input [batch, in_channels, input_size, input_size]."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prenet.layers.base import LayerCost, LayerType, cap, log_uniform_int, redraw, width


def output_size(input_size: int, kernel_size: int, stride: int, padding: int) -> int:
    """Spatial output side: ⌊(input + 2·padding − kernel) / stride⌋ + 1."""
    return (input_size + 2 * padding - kernel_size) // stride + 1


def derive(cfg: dict[str, int]) -> dict[str, int]:
    return {"output_size": output_size(cfg["input_size"], cfg["kernel_size"], cfg["stride"], cfg["padding"])}


def sample(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    """Log-uniform batch, channels and input size; kernel, stride from the listed choices; padding
    0 ('valid') or kernel//2 ('same'); configs above ``max_flops`` or with an empty output are redrawn. With
    ``powers_of_two`` the channels are rounded to the nearest power of two, as most CNNs set them (a CPU's GEMM on
    power-of-two strides runs slower: cache sets alias)."""

    def channels(bounds: list[int]) -> int:
        return width(rng, bounds, bool(space.get("powers_of_two")))

    def draw() -> dict[str, int] | None:  # None: an empty output
        k = int(rng.choice(space["kernel_size"]))
        cfg = {
            "batch": log_uniform_int(rng, *space["batch"]),
            "in_channels": channels(space["in_channels"]),
            "out_channels": channels(space["out_channels"]),
            "kernel_size": k,
            "input_size": log_uniform_int(rng, *space["input_size"]),
            "stride": int(rng.choice(space["stride"])),
            "padding": int(rng.choice([0, k // 2])),
        }
        return cfg if derive(cfg)["output_size"] >= 1 else None

    return redraw(
        draw,
        lambda c: cost(c, 4).forward_flops <= cap(space, "max_flops"),
        f"conv2d space {space} admits no configuration under max_flops; raise max_flops",
    )


def build(cfg: dict[str, int], device: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    module = nn.Conv2d(cfg["in_channels"], cfg["out_channels"], cfg["kernel_size"], stride=cfg["stride"], padding=cfg["padding"]).to(
        device=device, dtype=dtype
    )
    x = torch.randn(cfg["batch"], cfg["in_channels"], cfg["input_size"], cfg["input_size"], device=device, dtype=dtype)
    return module, x


def cost(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """Forward FLOPs = 2·batch·out_channels·output_size²·in_channels·kernel² (bias add not counted)."""
    b, ci, co, k = cfg["batch"], cfg["in_channels"], cfg["out_channels"], cfg["kernel_size"]
    h = cfg["input_size"]
    o = cfg.get("output_size") or derive(cfg)["output_size"]
    params = co * ci * k * k + co
    return LayerCost(
        forward_flops=2.0 * b * co * o * o * ci * k * k,
        params=params,
        weight_bytes=params * dtype_bytes,
        input_bytes=b * ci * h * h * dtype_bytes,
        output_bytes=b * co * o * o * dtype_bytes,
    )


CONV2D = LayerType(
    op="conv2d",
    shape_columns=("batch", "in_channels", "out_channels", "kernel_size", "input_size", "stride", "padding"),
    sample=sample,
    build=build,
    cost=cost,
    derived_columns=("output_size",),
    derive=derive,
)
