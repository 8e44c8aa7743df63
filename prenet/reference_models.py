"""Published architectures whose measured training throughput prenet checks its whole-model answers against
(``data/external/dle2024``): NVIDIA DeepLearningExamples' ResNeXt101-32x4d and SE-ResNeXt101-32x4d, at ImageNet size.

Built as the ConvNets README describes them: ResNet-101's bottleneck stages ([3, 4, 23, 3]) with grouped 3×3
convolutions (32 groups of width 4 in the first stage, doubling per stage), and for SE-ResNeXt a squeeze-and-excitation
block (reduction 16) on each bottleneck's output. Parameter counts: 44.2 M and 49.0 M (the published 44.18 M / 48.96 M).
"""

from __future__ import annotations

import torch
from torch import nn

Example = tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduction: int = 16):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))


class XBottleneck(nn.Module):
    """ResNeXt bottleneck: 1×1 → grouped 3×3 (stride here) → 1×1 (×4 out), optional SE, residual."""

    def __init__(self, cin: int, planes: int, stride: int, groups: int, base_width: int, se: bool):
        super().__init__()
        width = planes * base_width // 64 * groups
        out = planes * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.se = SqueezeExcite(out) if se else None
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        if self.se is not None:
            y = self.se(y)
        return self.relu(y + identity)


class ResNeXt(nn.Module):
    def __init__(self, layers: list[int], *, groups: int, base_width: int, se: bool, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, (planes, n) in enumerate(zip([64, 128, 256, 512], layers)):
            blocks = []
            for j in range(n):
                blocks.append(XBottleneck(cin, planes, 2 if (j == 0 and i > 0) else 1, groups, base_width, se))
                cin = planes * 4
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def resnext101_32x4d(batch_size: int = 128, image_size: int = 224, classes: int = 1000, se: bool = False) -> Example:
    """DeepLearningExamples' ResNeXt101-32x4d (``se``: SE-ResNeXt101-32x4d) on ``image_size``² RGB images."""
    model = ResNeXt([3, 4, 23, 3], groups=32, base_width=4, se=se, classes=classes)
    return model, (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


def se_resnext101_32x4d(batch_size: int = 128, image_size: int = 224, classes: int = 1000) -> Example:
    return resnext101_32x4d(batch_size, image_size, classes, se=True)


#: DeepLearningExamples' model names → builders
REFERENCE_MODELS = {"ResNeXt101-32x4d": resnext101_32x4d, "SE-ResNeXt101-32x4d": se_resnext101_32x4d}
