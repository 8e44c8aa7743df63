"""Small networks that are pre-trained here (no weights can be downloaded) and then fine-tuned.

Every network ends in a ``head`` :class:`torch.nn.Linear`, so a fine-tuning task swaps the head for one with
its own number of classes (:func:`with_new_head`) and then fine-tunes *all* parameters.
"""

from __future__ import annotations

import torch
from torch import nn

ARCHS = ("mlp", "cnn", "cnn_bn")


class MLP(nn.Module):
    """Flatten → [Linear → tanh] × len(widths) → head."""

    def __init__(self, in_features: int, widths: list[int], classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        prev = in_features
        for w in widths:
            layers += [nn.Linear(prev, w), nn.Tanh()]
            prev = w
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class CNN(nn.Module):
    """[Conv3×3 → (BatchNorm) → ReLU → (MaxPool2 when the map is ≥ 8 px)] × len(channels) → global average
    pool → head. Batch norm runs in eval mode during fine-tuning and forecasting (running statistics)."""

    def __init__(self, in_channels: int, channels: list[int], classes: int, *, image_size: int, batch_norm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev, size = in_channels, image_size
        for c in channels:
            layers.append(nn.Conv2d(prev, c, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(c))
            layers.append(nn.ReLU())
            if size >= 8:
                layers.append(nn.MaxPool2d(2))
                size //= 2
            prev = c
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build(arch: str, *, image_size: int, classes: int, widths: list[int] | None = None) -> nn.Module:
    """``arch``: ``mlp`` (widths = hidden sizes), ``cnn`` or ``cnn_bn`` (widths = conv channels)."""
    if arch == "mlp":
        return MLP(image_size * image_size, list(widths or [64, 64]), classes)
    if arch in ("cnn", "cnn_bn"):
        return CNN(1, list(widths or [16, 32]), classes, image_size=image_size, batch_norm=arch == "cnn_bn")
    raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")


def with_new_head(model: nn.Module, classes: int, *, seed: int, init_scale: float = 1.0) -> nn.Module:
    """``model`` with its ``head`` replaced by a fresh ``Linear(·, classes)`` (PyTorch's default init times
    ``init_scale``, drawn from ``seed``). The model is modified in place and returned."""
    old = model.head
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(old.in_features, classes)
    bound = 1.0 / old.in_features**0.5
    with torch.no_grad():
        head.weight.uniform_(-bound, bound, generator=g).mul_(init_scale)
        head.bias.uniform_(-bound, bound, generator=g).mul_(init_scale)
    model.head = head
    return model


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
