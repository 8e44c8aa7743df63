"""Built-in model zoo, constructed from configs (no downloaded weights). Each builder takes ``batch_size`` and
returns ``(module, (inputs, labels))``.

Sizes default to what a CPU can time in seconds (documented per model); the architectures are the standard
ones, and every size is a keyword argument (e.g. ``bert_base_like(batch_size=8, layers=12, seq_len=128)`` is
BERT-base).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

Example = tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]


def mlp(batch_size: int = 32, in_features: int = 784, hidden: int = 1024, depth: int = 3, classes: int = 10) -> Example:
    """An MLP on flattened 28×28 images: ``depth`` hidden layers of ``hidden`` units with ReLU."""
    layers: list[nn.Module] = []
    n = in_features
    for _ in range(depth):
        layers += [nn.Linear(n, hidden), nn.ReLU()]
        n = hidden
    layers.append(nn.Linear(n, classes))
    return nn.Sequential(*layers), (torch.randn(batch_size, in_features), torch.randint(0, classes, (batch_size,)))


_VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16(batch_size: int = 32, image_size: int = 32, classes: int = 10) -> Example:
    """VGG-16 (13 conv3×3 + 3 linear, no batch norm); default 32×32 images (CIFAR-size)."""
    layers: list[nn.Module] = []
    c = 3
    for v in _VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU()]
            c = int(v)
    side = image_size // 32
    model = nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(512 * side * side, 4096),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(4096, classes),
    )
    return model, (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        out_c = planes * 4
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU()
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU()
        self.conv3, self.bn3, self.relu3 = nn.Conv2d(planes, out_c, 1, bias=False), nn.BatchNorm2d(out_c), nn.ReLU()
        self.down = None
        if stride != 1 or cin != out_c:
            self.down = nn.Sequential(nn.Conv2d(cin, out_c, 1, stride, bias=False), nn.BatchNorm2d(out_c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)


class ResNet(nn.Module):
    def __init__(self, block: type, layers: list[int], classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2))
        stages, cin = [], 64
        for i, (planes, n) in enumerate(zip([64, 128, 256, 512], layers)):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def resnet18(batch_size: int = 32, image_size: int = 64, classes: int = 10) -> Example:
    """ResNet-18 (ImageNet stem, basic blocks [2, 2, 2, 2]); default 64×64 images."""
    return ResNet(BasicBlock, [2, 2, 2, 2], classes), (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


def resnet50(batch_size: int = 32, image_size: int = 64, classes: int = 10) -> Example:
    """ResNet-50 (bottleneck blocks [3, 4, 6, 3]); default 64×64 images."""
    return ResNet(Bottleneck, [3, 4, 6, 3], classes), (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(x))[0]).flatten(0, 1)


def lstm_lm(batch_size: int = 32, vocab: int = 10000, embed: int = 256, hidden: int = 512, layers: int = 2, seq_len: int = 35) -> Example:
    """A word-level LSTM language model (PTB-style: 10k vocabulary, 2 × 512 LSTM, 35-token windows)."""
    x = torch.randint(0, vocab, (batch_size, seq_len))
    return LSTMLanguageModel(vocab, embed, hidden, layers), (x, torch.randint(0, vocab, (batch_size * seq_len,)))


class TransformerBlock(nn.Module):
    """Post-norm (BERT) or pre-norm (GPT-2) block: self-attention and a GELU feed-forward, residual adds."""

    def __init__(self, d: int, heads: int, ffn: int, pre_norm: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))
        self.drop1, self.drop2 = nn.Dropout(0.1), nn.Dropout(0.1)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            h = self.ln1(x)
            x = x + self.drop1(self.attn(h, h, h, need_weights=False)[0])
            return x + self.drop2(self.ff(self.ln2(x)))
        x = self.ln1(x + self.drop1(self.attn(x, x, x, need_weights=False)[0]))
        return self.ln2(x + self.drop2(self.ff(x)))


class Transformer(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, ffn: int, layers: int, seq_len: int, pre_norm: bool, out: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq_len, d)
        self.blocks = nn.Sequential(*[TransformerBlock(d, heads, ffn, pre_norm) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)
        self.register_buffer("positions", torch.arange(seq_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos(self.positions)
        return self.head(self.ln_f(self.blocks(h))).flatten(0, 1)


def bert_base_like(batch_size: int = 32, vocab: int = 30522, layers: int = 2, seq_len: int = 64, classes: int = 2) -> Example:
    """BERT-base width (768 hidden, 12 heads, 3072 FFN, post-norm, GELU) with a per-token classifier; default 2 layers
    and 64 tokens so a CPU step takes seconds (``layers=12, seq_len=128`` is BERT-base)."""
    model = Transformer(vocab, 768, 12, 3072, layers, seq_len, pre_norm=False, out=classes)
    return model, (torch.randint(0, vocab, (batch_size, seq_len)), torch.randint(0, classes, (batch_size * seq_len,)))


def gpt2_small_like(batch_size: int = 32, vocab: int = 50257, layers: int = 2, seq_len: int = 32) -> Example:
    """GPT-2-small width (768 hidden, 12 heads, 3072 FFN, pre-norm) with the language-model head over the full 50,257
    vocabulary; default 2 layers and 32 tokens (``layers=12, seq_len=1024`` is GPT-2 small). The causal mask is
    omitted: it changes no FLOPs of the dense attention kernel timed here."""
    model = Transformer(vocab, 768, 12, 3072, layers, seq_len, pre_norm=True, out=vocab)
    return model, (torch.randint(0, vocab, (batch_size, seq_len)), torch.randint(0, vocab, (batch_size * seq_len,)))


# ---- architectures the op-level path must decompose (issue 11): none of them is measured by the op benchmark ----


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hid = cin * expand
        self.block = nn.Sequential(
            nn.Conv2d(cin, hid, 1, bias=False),
            nn.BatchNorm2d(hid),
            nn.ReLU6(),
            nn.Conv2d(hid, hid, 3, stride, 1, groups=hid, bias=False),
            nn.BatchNorm2d(hid),
            nn.ReLU6(),
            nn.Conv2d(hid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


def mobilenet_v2_like(batch_size: int = 32, image_size: int = 64, classes: int = 10, width: int = 32) -> Example:
    """MobileNetV2's inverted residuals (1×1 expand, 3×3 depthwise, ReLU6, 1×1 project) at ``width`` stem channels."""
    cfg = [(1, width // 2, 1, 1), (6, width * 3 // 4, 2, 2), (6, width, 3, 2), (6, width * 2, 2, 2), (6, width * 3, 2, 1)]
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU6()]
    cin = width
    for t, c, n, s in cfg:
        for i in range(n):
            layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [
        nn.Conv2d(cin, 4 * width, 1, bias=False),
        nn.BatchNorm2d(4 * width),
        nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    ]
    return nn.Sequential(*layers), (torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,)))


class _ViT(nn.Module):
    """A ViT whose top module owns parameters (class token, positional embedding)."""

    def __init__(self, image_size: int, patch: int, d: int, layers: int, heads: int, classes: int) -> None:
        super().__init__()
        n = (image_size // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1) + self.pos
        return self.head(self.norm(self.encoder(h))[:, 0])


def vit_tiny(batch_size: int = 32, image_size: int = 32, patch: int = 4, d: int = 192, layers: int = 4, heads: int = 3, classes: int = 10) -> Example:
    """ViT-Tiny-like (pre-norm encoder, GELU, class token and positional embedding owned by the top module)."""
    return _ViT(image_size, patch, d, layers, heads, classes), (
        torch.randn(batch_size, 3, image_size, image_size),
        torch.randint(0, classes, (batch_size,)),
    )


def audio_cnn1d(batch_size: int = 32, samples: int = 8000, channels: int = 64, classes: int = 12) -> Example:
    """A 1-D audio CNN on raw waveforms (Conv1d, BatchNorm1d, MaxPool1d), M5-like."""
    c = channels
    model = nn.Sequential(
        nn.Conv1d(1, c, 80, 4),
        nn.BatchNorm1d(c),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.Conv1d(c, c, 3),
        nn.BatchNorm1d(c),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.Conv1d(c, 2 * c, 3),
        nn.BatchNorm1d(2 * c),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(2 * c, classes),
    )
    return model, (torch.randn(batch_size, 1, samples), torch.randint(0, classes, (batch_size,)))


class _UNetBlock(nn.Module):
    """A diffusion U-Net's residual block: GroupNorm, SiLU, 3×3 convolutions, a skip 1×1, then down- and up-sampling."""

    def __init__(self, c: int, groups: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(groups, c), nn.Conv2d(c, 2 * c, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(groups, 2 * c), nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.skip = nn.Conv2d(c, 2 * c, 1)
        self.down = nn.Conv2d(2 * c, 2 * c, 3, 2, 1)
        self.up = nn.ConvTranspose2d(2 * c, c, 4, 2, 1)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c2(self.act(self.n2(self.c1(self.act(self.n1(x)))))) + self.skip(x)
        return self.up(self.down(h))


def unet_block(batch_size: int = 8, image_size: int = 32, channels: int = 64, groups: int = 32) -> Example:
    """One U-Net resolution level (GroupNorm, SiLU, convolutions, strided down, transposed up); loss = mean output."""
    return _UNetBlock(channels, groups), torch.randn(batch_size, channels, image_size, image_size)  # type: ignore[return-value]


class _Tagger(nn.Module):
    def __init__(self, vocab: int, d: int, hidden: int, tags: int, cell: type = nn.GRU) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.gru = cell(d, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(self.embed(x))[0]).flatten(0, 1)


def gru_tagger(batch_size: int = 32, vocab: int = 5000, d: int = 128, hidden: int = 256, seq_len: int = 40, tags: int = 17) -> Example:
    """A bidirectional GRU sequence tagger (one tag per token)."""
    return _Tagger(vocab, d, hidden, tags), (torch.randint(0, vocab, (batch_size, seq_len)), torch.randint(0, tags, (batch_size * seq_len,)))


def bilstm_tagger(batch_size: int = 32, vocab: int = 5000, d: int = 128, hidden: int = 256, seq_len: int = 40, tags: int = 17) -> Example:
    """A bidirectional LSTM sequence tagger (one tag per token; a CPU runs each layer and direction as one oneDNN kernel)."""
    model = _Tagger(vocab, d, hidden, tags, cell=nn.LSTM)
    return model, (torch.randint(0, vocab, (batch_size, seq_len)), torch.randint(0, tags, (batch_size * seq_len,)))


def wide_mlp(batch_size: int = 32, in_features: int = 784, hidden: int = 2048, depth: int = 2, classes: int = 10) -> Example:
    """A wide MLP, 784-2048-2048-10: a few large GEMMs, little else."""
    return mlp(batch_size, in_features, hidden, depth, classes)


class _GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class _GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, seq_len, d))
        self.blocks = nn.Sequential(*[_GPTBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.tok(x) + self.pos[:, : x.shape[1]]))).flatten(0, 1)


def gpt_sdpa(batch_size: int = 8, vocab: int = 8192, d: int = 256, layers: int = 4, heads: int = 4, seq_len: int = 128) -> Example:
    """A GPT with ``F.scaled_dot_product_attention`` (causal); ``d=2048, layers=24, heads=16, vocab=50257, seq_len=2048`` is
    GPT-3 XL (1.3 B parameters)."""
    return _GPT(vocab, d, layers, heads, seq_len), (torch.randint(0, vocab, (batch_size, seq_len)), torch.randint(0, vocab, (batch_size * seq_len,)))


class _Functional(nn.Module):
    """Parameters only; the forward is functional calls and chained ``@`` products."""

    def __init__(self, din: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(din, hidden) * din**-0.5)
        self.w2 = nn.Parameter(torch.randn(hidden, hidden) * hidden**-0.5)
        self.w3 = nn.Parameter(torch.randn(hidden, classes) * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(x @ self.w1)
        h = torch.nn.functional.layer_norm(h @ self.w2, (h.shape[-1],))
        return torch.softmax(h, -1) @ self.w2 @ self.w3


def functional_mlp(batch_size: int = 64, din: int = 512, hidden: int = 1024, classes: int = 10) -> Example:
    """A model whose ``forward`` uses only functional calls and chained matmuls (no ``nn.Linear``)."""
    return _Functional(din, hidden, classes), (torch.randn(batch_size, din), torch.randint(0, classes, (batch_size,)))


ZOO: dict[str, Callable[..., Example]] = {
    "mlp": mlp,
    "vgg16": vgg16,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "lstm_lm": lstm_lm,
    "bert_base_like": bert_base_like,
    "gpt2_small_like": gpt2_small_like,
    "mobilenet_v2_like": mobilenet_v2_like,
    "vit_tiny": vit_tiny,
    "audio_cnn1d": audio_cnn1d,
    "unet_block": unet_block,
    "gru_tagger": gru_tagger,
    "gpt_sdpa": gpt_sdpa,
    "functional_mlp": functional_mlp,
    "bilstm_tagger": bilstm_tagger,
    "wide_mlp": wide_mlp,
}


#: For a zoo model named after a published one: the builder keywords that, left at their defaults, make it smaller than
#: that model (none: any default kept), and how to build the full-size one.
FULL_SIZE: dict[str, tuple[tuple[str, ...], str]] = {
    "resnet18": (("image_size", "classes"), "--model-arg image_size=224 --model-arg classes=1000, or torchvision:resnet18"),
    "resnet50": (("image_size", "classes"), "--model-arg image_size=224 --model-arg classes=1000, or torchvision:resnet50"),
    "vgg16": (("image_size", "classes"), "--model-arg image_size=224 --model-arg classes=1000, or torchvision:vgg16"),
    "bert_base_like": (("layers", "seq_len"), "--model-arg layers=12 --seq-len 512, or hf:bert"),
    "gpt2_small_like": (("layers", "seq_len"), "--model-arg layers=12 --seq-len 1024, or hf:gpt2"),
    "mobilenet_v2_like": ((), "torchvision:mobilenet_v2"),
    "vit_tiny": ((), "timm:vit_tiny_patch16_224"),
}


def defaults_note(name: str, given: dict | None = None) -> str | None:
    """The line an answer about zoo model ``name`` carries where its builder kept defaults the user did not set
    (``given``: the builder keywords set): those defaults, and for a model named after a published one whose defaults
    that make it smaller were kept, how to build that (:data:`FULL_SIZE`). None for a name outside the zoo or with
    every size given."""
    import inspect

    if name not in ZOO:
        return None
    kept = {
        k: p.default
        for k, p in inspect.signature(ZOO[name]).parameters.items()
        if k != "batch_size" and p.default is not inspect.Parameter.empty and k not in (given or {})
    }
    if not kept:
        return None
    sizes = ", ".join(f"{k}={v}" for k, v in kept.items())
    keys, how = FULL_SIZE.get(name, (None, ""))
    smaller = keys is not None and (not keys or bool(set(keys) & set(kept)))
    full = f"; smaller than the model it is named after, which is {how}" if smaller else ""
    return f"zoo model {name} at its defaults {sizes} (prenet/zoo.py; --model-arg KEY=VALUE sets them){full}"


def build(name: str, batch_size: int, sizes: dict[str, dict] | None = None) -> Example:
    """Zoo model ``name`` at ``batch_size`` with the builder keyword overrides of ``sizes[name]`` (the
    ``models.sizes`` config); an unknown name lists the known ones."""
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}")
    return ZOO[name](batch_size=batch_size, **dict((sizes or {}).get(name, {})))
