"""Published architectures whose measured training steps prenet checks its whole-model answers against, at ImageNet
size (224² RGB, 1000 classes):

* NVIDIA DeepLearningExamples' ResNeXt101-32x4d and SE-ResNeXt101-32x4d (``data/external/dle2024``), built as the
  ConvNets README describes them: ResNet-101's bottleneck stages ([3, 4, 23, 3]) with grouped 3×3 convolutions (32
  groups of width 4 in the first stage, doubling per stage), and for SE-ResNeXt a squeeze-and-excitation block
  (reduction 16) on each bottleneck's output. Parameter counts: 44.2 M and 49.0 M (the published 44.18 M / 48.96 M).
* DeepLearningExamples' Transformer (big, WMT14 en-de) (fairseq's ``transformer_wmt_en_de_big``): 6 + 6 layers of
  width 1024, FFN 4096, 16 heads, shared 32,768-token embeddings (209.9 M parameters; the multi-GPU scaling check).
* torchvision's ResNet, ResNeXt, Wide ResNet and VGG families (``data/external/pytorch_gpu_benchmark``), layer for
  layer as ``torchvision.models`` builds them (stride on the 3×3 of a bottleneck, max-pool padding 1, VGG's 7×7
  adaptive pool and dropout head); every parameter count equals torchvision's (:data:`TORCHVISION_PARAMS`). torchvision
  itself is not a dependency: its wheels here are CUDA builds that do not import beside CPU torch.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

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


class XBasicBlock(nn.Module):
    """ResNet-18/34 basic block: 3×3 (stride here) → 3×3, residual."""

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + identity)


class ResNeXt(nn.Module):
    """torchvision's ResNet skeleton: 7×7 stem, four stages of basic (``basic``) or bottleneck blocks, pooled linear head."""

    def __init__(self, layers: list[int], *, groups: int = 1, base_width: int = 64, se: bool = False, classes: int = 1000, basic: bool = False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, (planes, n) in enumerate(zip([64, 128, 256, 512], layers)):
            blocks: list[nn.Module] = []
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(XBasicBlock(cin, planes, stride) if basic else XBottleneck(cin, planes, stride, groups, base_width, se))
                cin = planes * (1 if basic else 4)
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


class TransformerBig(nn.Module):
    """fairseq's ``transformer_wmt_en_de_big`` as DeepLearningExamples trains it on WMT14 en-de: 6 encoder and 6 decoder
    layers, width 1024, FFN 4096, 16 heads, post-norm, dropout 0.3, sinusoidal positions, one embedding shared by
    source, target and the output projection over a joint BPE vocabulary (``vocab``). The input packs a batch of
    ``seq_len``-token source and target sentences side by side (``B × 2·seq_len``); the labels are the target tokens."""

    def __init__(self, vocab: int = 32768, d: int = 1024, heads: int = 16, ffn: int = 4096, layers: int = 6, seq_len: int = 32):
        super().__init__()
        self.seq_len = seq_len
        self.embed = nn.Embedding(vocab, d, padding_idx=1)
        pos = torch.arange(seq_len).unsqueeze(1) * torch.exp(torch.arange(0, d, 2) * (-torch.log(torch.tensor(10000.0)) / d))
        self.register_buffer("positions", torch.cat([torch.sin(pos), torch.cos(pos)], dim=1), persistent=False)
        self.core = nn.Transformer(d, heads, layers, layers, ffn, dropout=0.3, batch_first=True)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)
        self.scale = d**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        src, tgt = x[:, : self.seq_len], x[:, self.seq_len :]
        s = self.embed(src) * self.scale + self.positions
        t = self.embed(tgt) * self.scale + self.positions
        out = self.core(s, t, tgt_mask=self.causal, tgt_is_causal=True)
        return nn.functional.linear(out, self.embed.weight).flatten(0, 1)  # tied output projection, one row per target token


def transformer_big_wmt(batch_size: int = 10240, seq_len: int = 32, vocab: int = 32768) -> Example:
    """DeepLearningExamples' Transformer (big) at ``batch_size`` = ``--max-tokens`` per GPU: ``batch_size // seq_len``
    sentence pairs of ``seq_len`` tokens (WMT14 en-de sentences average ~30 BPE tokens; the batch is length-bucketed)."""
    b = max(batch_size // seq_len, 1)
    model = TransformerBig(vocab=vocab, seq_len=seq_len)
    return model, (torch.randint(2, vocab, (b, 2 * seq_len)), torch.randint(2, vocab, (b * seq_len,)))


class MBConv(nn.Module):
    """EfficientNet's inverted bottleneck as DeepLearningExamples builds it: 1×1 expansion (absent at ratio 1) →
    depthwise k×k (stride here) → squeeze-and-excitation (SiLU, two biased 1×1 convolutions, sigmoid gate; squeezed to a
    quarter of the block's input channels, or of its expanded channels for the WideSE variant) → 1×1 projection; each
    convolution bias-free with batch norm (ε 10⁻³), SiLU after the first two. The residual (stride 1, equal widths) is
    ``addcmul(x, mask, y)`` where stochastic depth is on (``survival`` < 1: a batch-wide dropout of a scalar mask)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int, wide_se: bool, survival: float):
        super().__init__()
        hidden = cin * expand

        def conv_bn(a: int, b: int, k: int, s: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
            layers = [nn.Conv2d(a, b, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(b, eps=1e-3)]
            return nn.Sequential(*layers, nn.SiLU(inplace=True)) if act else nn.Sequential(*layers)

        self.expand = conv_bn(cin, hidden, 1) if expand != 1 else None
        self.depthwise = conv_bn(hidden, hidden, kernel, stride, groups=hidden)
        squeeze = max(1, int((hidden if wide_se else cin) * 0.25))
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, squeeze, 1), nn.SiLU(inplace=True), nn.Conv2d(squeeze, hidden, 1), nn.Sigmoid()
        )
        self.project = conv_bn(hidden, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout
        self.survival = survival
        self.register_buffer("one", torch.ones(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(x if self.expand is None else self.expand(x))
        y = self.project(y * self.se(y))
        if not self.residual:
            return y
        if self.survival < 1.0 and self.training:
            with torch.no_grad():
                mask = nn.functional.dropout(self.one, p=1 - self.survival, training=True)
            return torch.addcmul(x, mask, y)
        return x + y


#: EfficientNet-B0's stages: (kernel, stride, repeats, expansion, output channels)
_EFFNET_B0 = ((3, 1, 1, 1, 16), (3, 2, 2, 6, 24), (5, 2, 2, 6, 40), (3, 2, 3, 6, 80), (5, 1, 3, 6, 112), (5, 2, 4, 6, 192), (3, 1, 1, 6, 320))
#: DeepLearningExamples' EfficientNet variants: (width multiplier, depth multiplier, dropout, stochastic-depth survival
#: probability of the last block, WideSE)
EFFICIENTNETS = {
    "efficientnet-b0": (1.0, 1.0, 0.2, 1.0, False),
    "efficientnet-b4": (1.4, 1.8, 0.4, 0.8, False),
    "efficientnet-widese-b0": (1.0, 1.0, 0.2, 1.0, True),
    "efficientnet-widese-b4": (1.4, 1.8, 0.4, 0.8, True),
}


def _round_channels(c: float, divisor: int = 8) -> int:
    """EfficientNet's width rounding: to the nearest multiple of ``divisor``, never more than 10 % down."""
    r = max(divisor, int(c + divisor / 2) // divisor * divisor)
    return r + divisor if r < 0.9 * c else r


class EfficientNet(nn.Module):
    """EfficientNet (Tan & Le 2019) as DeepLearningExamples' ConvNets builds it (:data:`EFFICIENTNETS`): a 3×3 stride-2
    stem, the compound-scaled MBConv stages (:class:`MBConv`; stochastic-depth survival falling linearly from 1 to the
    variant's value over the blocks), a 1×1 convolution to 1280 × width features, average pooling, dropout and the
    classifier."""

    def __init__(self, variant: str, classes: int = 1000):
        super().__init__()
        wc, dc, dropout, survival, wide_se = EFFICIENTNETS[variant]
        stem = _round_channels(32 * wc)
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem, eps=1e-3), nn.SiLU(inplace=True))
        stages = [(k, s, int(math.ceil(r * dc)), e, _round_channels(c * wc)) for k, s, r, e, c in _EFFNET_B0]
        total, blocks, cin, i = sum(r for _, _, r, _, _ in stages), [], stem, 0
        for k, s, r, e, c in stages:
            for j in range(r):
                keep = 1.0 - (1.0 - survival) * i / total
                blocks.append(MBConv(cin, c, k, s if j == 0 else 1, e, wide_se, keep))
                cin, i = c, i + 1
        self.blocks = nn.Sequential(*blocks)
        feat = _round_channels(1280 * wc)
        self.features = nn.Sequential(nn.Conv2d(cin, feat, 1, bias=False), nn.BatchNorm2d(feat, eps=1e-3), nn.SiLU(inplace=True))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(feat, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.blocks(self.stem(x))))


def efficientnet(variant: str, batch_size: int = 256, image_size: int = 224, classes: int = 1000) -> Example:
    """DeepLearningExamples' EfficientNet ``variant`` (:data:`EFFICIENTNETS`) on ``image_size``² RGB images."""
    model = EfficientNet(variant, classes)
    return model, (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


#: DeepLearningExamples' model names → builders
REFERENCE_MODELS = {
    "ResNeXt101-32x4d": resnext101_32x4d,
    "SE-ResNeXt101-32x4d": se_resnext101_32x4d,
    "Transformer (big, WMT14 en-de)": transformer_big_wmt,
    **{v: partial(efficientnet, v) for v in EFFICIENTNETS},
}


class DleRecipe(NamedTuple):
    """How DeepLearningExamples trains one model: the prenet optimizer, whether it is one fused kernel, whether AMP runs
    NHWC, and how AMP runs (``autocast`` | ``o2``)."""

    optimizer: str
    fused: bool
    nhwc: bool
    amp: str


#: How DeepLearningExamples trains each model. ConvNets' ``configs.yml``: ResNeXt SGD with momentum; EfficientNet RMSprop
#: with momentum 0.9; AMP as ``torch.cuda.amp`` autocast in ``memory_format: nhwc``. The Transformer (fairseq): apex's
#: ``FusedAdam`` in every precision (its ``fairseq/optim/adam.py``: one multi-tensor kernel, torch's ``fused=True``), AMP
#: as apex ``--amp-level O2`` (its README): the model's weights and activations in FP16 throughout, no per-op casts, the
#: loss scaled, and the optimizer on FP32 master weights (the FP16 gradients unscaled into FP32 ones, the FP32 weights
#: copied back: :func:`prenet.ops.trace.trace_step`'s ``master_weights``).
DLE_RECIPES = {
    "ResNeXt101-32x4d": DleRecipe("momentum", False, True, "autocast"),
    "SE-ResNeXt101-32x4d": DleRecipe("momentum", False, True, "autocast"),
    "Transformer (big, WMT14 en-de)": DleRecipe("adam", True, False, "o2"),
    **{v: DleRecipe("rmsprop", False, True, "autocast") for v in EFFICIENTNETS},
}

#: torchvision ResNet-family names → (blocks per stage, groups, width per group, basic blocks)
_RESNETS: dict[str, tuple[list[int], int, int, bool]] = {
    "resnet18": ([2, 2, 2, 2], 1, 64, True),
    "resnet34": ([3, 4, 6, 3], 1, 64, True),
    "resnet50": ([3, 4, 6, 3], 1, 64, False),
    "resnet101": ([3, 4, 23, 3], 1, 64, False),
    "resnet152": ([3, 8, 36, 3], 1, 64, False),
    "resnext50_32x4d": ([3, 4, 6, 3], 32, 4, False),
    "resnext101_32x8d": ([3, 4, 23, 3], 32, 8, False),
    "wide_resnet50_2": ([3, 4, 6, 3], 1, 128, False),
    "wide_resnet101_2": ([3, 4, 23, 3], 1, 128, False),
}

#: torchvision VGG configurations (channels per 3×3 convolution, ``M``: 2×2 max-pool)
_VGGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


def _vgg(config: list[int | str], batch_norm: bool, classes: int) -> nn.Module:
    layers: list[nn.Module] = []
    c = 3
    for v in config:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
            continue
        layers.append(nn.Conv2d(c, int(v), 3, padding=1))
        layers += [nn.BatchNorm2d(int(v)), nn.ReLU(inplace=True)] if batch_norm else [nn.ReLU(inplace=True)]
        c = int(v)
    head = [nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(), nn.Linear(4096, classes)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(7), nn.Flatten(), *head)


class Fire(nn.Module):
    """SqueezeNet's fire module: a 1×1 squeeze, then 1×1 and 3×3 expands concatenated (ReLU after each)."""

    def __init__(self, inplanes: int, squeeze: int, expand1: int, expand3: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(inplanes, squeeze, 1), nn.ReLU(inplace=True))
        self.expand1 = nn.Sequential(nn.Conv2d(squeeze, expand1, 1), nn.ReLU(inplace=True))
        self.expand3 = nn.Sequential(nn.Conv2d(squeeze, expand3, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.expand1(x), self.expand3(x)], 1)


def _squeezenet(version: str, classes: int) -> nn.Module:
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    if version == "1_0":
        stem = [nn.Conv2d(3, 96, 7, stride=2), nn.ReLU(inplace=True), pool()]
        fires = [Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), pool(), Fire(256, 32, 128, 128)]
        fires += [Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), pool(), Fire(512, 64, 256, 256)]
    else:
        stem = [nn.Conv2d(3, 64, 3, stride=2), nn.ReLU(inplace=True), pool()]
        fires = [Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(), Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool()]
        fires += [Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256)]
    head = [nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*stem, *fires, *head)


class DenseLayer(nn.Module):
    """DenseNet's layer: BN-ReLU-1×1 conv to ``bn_size·growth`` channels, BN-ReLU-3×3 conv to ``growth``, on the
    concatenation of every earlier feature map of its block (torchvision's, without memory-efficient checkpointing)."""

    def __init__(self, inplanes: int, growth: int, bn_size: int):
        super().__init__()
        mid = bn_size * growth
        self.norm1, self.relu1, self.conv1 = nn.BatchNorm2d(inplanes), nn.ReLU(inplace=True), nn.Conv2d(inplanes, mid, 1, bias=False)
        self.norm2, self.relu2, self.conv2 = nn.BatchNorm2d(mid), nn.ReLU(inplace=True), nn.Conv2d(mid, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, layers: int, inplanes: int, growth: int, bn_size: int):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(inplanes + i * growth, growth, bn_size) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, growth: int, blocks: tuple[int, ...], init: int, classes: int, bn_size: int = 4):
        super().__init__()
        stages: list[nn.Module] = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            stages.append(DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i < len(blocks) - 1:
                stages += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        self.features = nn.Sequential(*stages, nn.BatchNorm2d(c))
        self.head = nn.Sequential(nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


#: torchvision DenseNet names → (growth rate, layers per block, stem channels)
_DENSENETS: dict[str, tuple[int, tuple[int, ...], int]] = {
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet161": (48, (6, 12, 36, 24), 96),
    "densenet169": (32, (6, 12, 32, 32), 64),
    "densenet201": (32, (6, 12, 48, 32), 64),
}


def torchvision_model(name: str, batch_size: int = 32, image_size: int = 224, classes: int = 1000) -> Example:
    """torchvision's ``name`` (a key of :data:`TORCHVISION_PARAMS`) on ``image_size``² RGB images, untrained."""
    if name in _RESNETS:
        layers, groups, width, basic = _RESNETS[name]
        model: nn.Module = ResNeXt(layers, groups=groups, base_width=width, classes=classes, basic=basic)
    elif name.removesuffix("_bn") in _VGGS:
        model = _vgg(_VGGS[name.removesuffix("_bn")], name.endswith("_bn"), classes)
    elif name in _DENSENETS:
        model = DenseNet(*_DENSENETS[name], classes=classes)
    elif name in ("squeezenet1_0", "squeezenet1_1"):
        model = _squeezenet(name.removeprefix("squeezenet"), classes)
    else:
        raise KeyError(f"no torchvision architecture {name!r} here; choose one of {', '.join(TORCHVISION_PARAMS)}")
    return model, (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


#: torchvision's published parameter counts (``torchvision.models`` weights tables) of the architectures built here
TORCHVISION_PARAMS: dict[str, int] = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "resnext50_32x4d": 25_028_904,
    "resnext101_32x8d": 88_791_336,
    "wide_resnet50_2": 68_883_240,
    "wide_resnet101_2": 126_886_696,
    "vgg11": 132_863_336,
    "vgg11_bn": 132_868_840,
    "vgg13": 133_047_848,
    "vgg13_bn": 133_053_736,
    "vgg16": 138_357_544,
    "vgg16_bn": 138_365_992,
    "vgg19": 143_667_240,
    "vgg19_bn": 143_678_248,
    "densenet121": 7_978_856,
    "densenet161": 28_681_000,
    "densenet169": 14_149_480,
    "densenet201": 20_013_928,
    "squeezenet1_0": 1_248_424,
    "squeezenet1_1": 1_235_496,
}
