"""The op benchmark: real training steps of sampled layers and blocks on the CPU, every ATen op timed in place.

Configurations come from the layer registry's samplers (PreNeT's layer types, the spaces of ``conf/benchmark``)
plus blocks the registry lacks — depthwise and grouped convolutions with ReLU6, Conv1d / BatchNorm1d / MaxPool1d,
GroupNorm + SiLU, ``F.scaled_dot_product_attention``, a language model's embedding and vocabulary head with its loss. Each configuration runs one training step (forward, the mean
of the output as loss, backward to weights and input, an SGD or Adam step) under :func:`prenet.ops.measure_step`;
a share of them also under ``torch.autocast("cpu", bfloat16)``. No zoo model is measured here: the zoo is the
whole-model test set.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F
from torch import nn

from prenet.errors import ConfigError, PrenetError
from prenet.layers import REGISTRY
from prenet.layers.base import log_uniform_int
from prenet.measurement.timer import fastest_round, round_spread
from prenet.ops import measure_step


class _DepthwiseBlock(nn.Module):
    def __init__(self, c: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        self.expand = nn.Conv2d(c, c * expand, 1, bias=False)
        self.dw = nn.Conv2d(c * expand, c * expand, k, stride=stride, padding=k // 2, groups=c * expand, bias=False)
        self.bn = nn.BatchNorm2d(c * expand)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.dw(self.expand(x))))


class _Conv1dBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, padding=k // 2)
        self.bn = nn.BatchNorm1d(cout)
        self.pool = nn.MaxPool1d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(F.relu(self.bn(self.conv(x))))


class _GroupNormBlock(nn.Module):
    def __init__(self, c: int, groups: int, conv_groups: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, c)
        self.conv = nn.Conv2d(c, c, 3, padding=1, groups=conv_groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.silu(self.norm(x)))


class _SDPABlock(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal).transpose(1, 2).reshape(b, t, d)


class _LMHeadBlock(nn.Module):
    """Token embedding → a vocabulary-sized output layer → cross-entropy: the shapes of a language model's ends (a 50k
    vocabulary's GEMM, log-softmax and sparse embedding gradient), far beyond the registry's layer spaces."""

    def __init__(self, vocab: int, d: int, tokens: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("labels", torch.randint(0, vocab, (tokens,)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.embed(x)), self.labels)


#: The keys of :data:`DEPTHWISE_SPACE` drawn log-uniformly from a [low, high] range (the others from a list).
_RANGED = ("batch", "channels", "input_size")
#: The depthwise block's sampling space: log-uniform [low, high] of ``batch``, ``channels`` (before the expansion) and
#: ``input_size`` (pixels a side); ``kernel_size``, ``stride`` and ``expand`` drawn from their lists. A config's
#: ``space`` (``ops.benchmark.bf16_native_blocks``) overrides keys of it.
DEPTHWISE_SPACE: dict[str, list[int]] = {
    "batch": [1, 32],
    "channels": [8, 96],
    "input_size": [4, 56],
    "kernel_size": [3, 5],
    "stride": [1, 2],
    "expand": [1, 4, 6],
}


def _blocks() -> dict[str, tuple[Callable[[np.random.Generator], dict[str, int]], Callable[[dict[str, int]], tuple[nn.Module, torch.Tensor]]]]:
    def s_dw(r, space=None):
        sp = {**DEPTHWISE_SPACE, **(space or {})}
        return {
            "batch": log_uniform_int(r, *sp["batch"]),
            "channels": log_uniform_int(r, *sp["channels"]),
            "input_size": log_uniform_int(r, *sp["input_size"]),
            "kernel_size": int(r.choice(sp["kernel_size"])),
            "stride": int(r.choice(sp["stride"])),
            "expand": int(r.choice(sp["expand"])),
        }

    def b_dw(c):
        return _DepthwiseBlock(c["channels"], c["kernel_size"], c["stride"], c["expand"]), torch.randn(
            c["batch"], c["channels"], c["input_size"], c["input_size"]
        )

    def s_c1(r):
        return {
            "batch": log_uniform_int(r, 1, 32),
            "in_channels": log_uniform_int(r, 1, 128),
            "out_channels": log_uniform_int(r, 8, 128),
            "length": log_uniform_int(r, 16, 4000),
            "kernel_size": int(r.choice([3, 5, 9])),
        }

    def b_c1(c):
        return _Conv1dBlock(c["in_channels"], c["out_channels"], c["kernel_size"]), torch.randn(c["batch"], c["in_channels"], c["length"])

    def s_gn(r):
        g = int(r.choice([4, 8, 16, 32]))
        return {
            "batch": log_uniform_int(r, 1, 16),
            "channels": g * log_uniform_int(r, 1, 8),
            "groups": g,
            "input_size": log_uniform_int(r, 4, 32),
            "conv_groups": int(r.choice([1, 1, 2, 4])),
        }

    def b_gn(c):
        return _GroupNormBlock(c["channels"], c["groups"], c["conv_groups"]), torch.randn(c["batch"], c["channels"], c["input_size"], c["input_size"])

    def s_sdpa(r):
        h = int(r.choice([1, 2, 4, 8]))
        return {
            "batch": log_uniform_int(r, 1, 16),
            "seq_len": log_uniform_int(r, 8, 256),
            "heads": h,
            "head_dim": int(r.choice([16, 32, 64])),
            "causal": int(r.integers(0, 2)),
        }

    def b_sdpa(c):
        d = c["heads"] * c["head_dim"]
        return _SDPABlock(d, c["heads"], bool(c["causal"])), torch.randn(c["batch"], c["seq_len"], d)

    def s_lm(r):
        return {"vocab": log_uniform_int(r, 2000, 50000), "d": log_uniform_int(r, 64, 768), "tokens": log_uniform_int(r, 16, 192)}

    def b_lm(c):
        return _LMHeadBlock(c["vocab"], c["d"], c["tokens"]), torch.randint(0, c["vocab"], (c["tokens"],))

    return {
        "depthwise_block": (s_dw, b_dw),
        "conv1d_block": (s_c1, b_c1),
        "groupnorm_block": (s_gn, b_gn),
        "sdpa_block": (s_sdpa, b_sdpa),
        "lm_head_block": (s_lm, b_lm),
    }


BLOCKS = _blocks()


def config_id(kind: str, cfg: dict[str, int]) -> str:
    """Stable identity of a configuration (the frozen split's key)."""
    return hashlib.sha256(f"{kind}|{json.dumps(cfg, sort_keys=True)}".encode()).hexdigest()[:16]


def sample_configs(spaces: dict[str, Any], *, per_kind: int, seed: int, max_flops: float | None = None) -> list[tuple[str, dict[str, int]]]:
    """``per_kind`` configurations of every registry layer (from ``spaces``: ``conf/benchmark``'s ``ops``, with their
    ``max_flops`` lowered to ``max_flops``) and block."""
    rng = np.random.default_rng(seed)
    out = []
    for op, lt in REGISTRY.items():
        space = dict(spaces[op]["space"]) if op in spaces else None
        if space is None:
            continue
        if max_flops is not None and "max_flops" in space:
            space["max_flops"] = min(float(space["max_flops"]), float(max_flops))
        for _ in range(per_kind):
            out.append((op, lt.complete(lt.sample(rng, space))))
    for kind, (sample, _) in BLOCKS.items():
        for _ in range(per_kind):
            out.append((kind, sample(rng)))
    return out


def _named_generator(seed: int, name: str) -> np.random.Generator:
    """A generator of its own for ``name`` (a space or block kind), so that adding a name draws nothing from another's."""
    return np.random.default_rng([seed, int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)])


def sample_blocks(counts: dict[str, Any], *, seed: int, where: str = "ops.benchmark.bf16_native_blocks") -> list[tuple[str, dict[str, int]]]:
    """More configurations of blocks: ``counts`` maps a name to how many of that block kind, or to ``{kind, configs,
    space}`` (``kind`` defaults to the name; ``space`` overrides keys of the kind's sampling space, the depthwise block's
    only: :data:`DEPTHWISE_SPACE`). Each name draws from its own generator (``seed`` and the name), so that adding some
    leaves every other configuration as it was. ``where``: the config key ``counts`` came from, for the errors."""
    out = []
    for name in sorted(counts):
        spec = counts[name] if isinstance(counts[name], dict) else {"configs": counts[name]}
        kind = str(spec.get("kind", name))
        if kind not in BLOCKS:
            raise PrenetError(f"block kind {kind!r} ({where}.{name}) is not one of {sorted(BLOCKS)}")
        space = spec.get("space")
        if space and kind != "depthwise_block":
            raise PrenetError(f"{where}.{name}: only depthwise_block takes a space; remove it")
        unknown = sorted(set(space or {}) - set(DEPTHWISE_SPACE))
        if unknown:
            raise PrenetError(f"{where}.{name}.space: unknown keys {unknown}; use {sorted(DEPTHWISE_SPACE)}")
        for key, v in (space or {}).items():
            ranged = key in _RANGED
            ok = isinstance(v, list) and v and all(isinstance(i, int) and i > 0 for i in v) and (not ranged or (len(v) == 2 and v[0] <= v[1]))
            if not ok:
                want = "[low, high], positive integers, low <= high" if ranged else "a non-empty list of positive integers"
                raise PrenetError(f"{where}.{name}.space.{key}: {v!r}; give {want}")
        sample, _ = BLOCKS[kind]
        rng = _named_generator(seed + 2, name)
        out += [(kind, sample(rng, space) if space else sample(rng)) for _ in range(int(spec["configs"]))]
    return out


#: Size keys a real model tends to set to multiples of 16 / 64 (widths, channels, batch); ``sample_wide`` snaps a share.
_ALIGNABLE = ("batch", "in_features", "out_features", "in_channels", "out_channels", "hidden_size", "hidden", "embedding_dim")


def snap_aligned(cfg: dict[str, int], rng: np.random.Generator, share: float) -> dict[str, int]:
    """``cfg`` with each size in :data:`_ALIGNABLE` (≥ 16) rounded, with probability ``share``, to a multiple of 64 (sizes
    ≥ 128) or 16: real models use 768 and 3072, log-uniform sampling almost never does, and CPU GEMM kernels run
    aligned shapes faster (``prenet.steptime.efficiency.alignment``)."""
    out = dict(cfg)
    for k in _ALIGNABLE:
        if k in out and out[k] >= 16 and rng.random() < share:
            q = 64 if out[k] >= 128 else 16
            out[k] = max(q, int(round(out[k] / q)) * q)
    return out


def sample_wide(wide: dict[str, Any], *, seed: int, aligned_share: float) -> list[tuple[str, dict[str, int]]]:
    """Extra configurations of registry layers over wider spaces (``ops.benchmark.wide``: name → {configs, space}, the
    name a registry kind or a spec's ``kind``: one kind may have several spaces), sized like the zoo's layers (GEMMs to
    ~6 GFLOP, 22 MB activations, LSTM layers of 1024 units) so that no zoo op lies beyond the measured range; a share of
    sizes aligned (:func:`snap_aligned`). Each space draws from its own generator (``seed`` and its name), so adding a
    space leaves the others' configurations as they were."""
    out = []
    for name in sorted(wide):
        spec = wide[name]
        kind = str(spec.get("kind", name))
        lt = REGISTRY[kind]
        rng = _named_generator(seed + 1, name)
        for _ in range(int(spec["configs"])):
            try:
                cfg = lt.sample(rng, dict(spec["space"]))
            except ConfigError as e:  # name the space (a key of ops.benchmark's wide, bf16_wide or bf16_native_wide)
                raise ConfigError(f"op benchmark space {name!r}: {e}") from e
            out.append((kind, lt.complete(snap_aligned(cfg, rng, aligned_share))))
    return out


def build_config(kind: str, cfg: dict[str, int]) -> tuple[nn.Module, torch.Tensor]:
    if kind in BLOCKS:
        return BLOCKS[kind][1](cfg)
    return REGISTRY[kind].build(cfg, "cpu", torch.float32)


def forward_flops(kind: str, cfg: dict[str, int]) -> float:
    """Forward FLOPs of a registry layer (analytic); blocks: estimated from their sizes (used only to cap BF16 runs)."""
    if kind in REGISTRY:
        return REGISTRY[kind].cost(cfg, 4).forward_flops
    return float(math.prod(v for k, v in cfg.items() if k not in ("stride", "causal", "groups", "conv_groups")))


def across_rounds_frame(rounds: list[pl.DataFrame]) -> pl.DataFrame:
    """One configuration's timed ops from several interleaved rounds of :func:`measure_config` (the same step each
    round, so the same ops in the same order): ``measured_ms`` each op's fastest round
    (:func:`~prenet.measurement.timer.fastest_round`), ``spread_rel`` the round-to-round spread
    (:func:`~prenet.measurement.timer.round_spread`), ``probe_ms`` (when present) the fastest of the rounds' probes: the
    host speed the fastest rounds ran at. One round is returned as it is."""
    if len(rounds) == 1:
        return rounds[0]
    first = rounds[0]
    if any(f.height != first.height or f.get_column("op").to_list() != first.get_column("op").to_list() for f in rounds[1:]):
        raise PrenetError(f"config {first['config_id'][0]}: the rounds traced different ops; measure it in one round")
    times = np.stack([f.get_column("measured_ms").to_numpy() for f in rounds])
    out = first.with_columns(pl.Series("measured_ms", fastest_round(times)), pl.Series("spread_rel", round_spread(times)[1]))
    if "probe_ms" in first.columns:
        out = out.with_columns(pl.lit(float(fastest_round(np.asarray([f["probe_ms"][0] for f in rounds])))).alias("probe_ms"))
    return out


def measure_config(
    kind: str, cfg: dict[str, int], *, optimizer: str, precision: str, min_block_ms: float, repeats: int, warmup: bool = True
) -> pl.DataFrame:
    """The timed ops of one training step of a configuration, with ``config_id``, ``kind``, ``optimizer`` and ``precision``
    (``warmup``: one untimed step first, :func:`~prenet.ops.trace.measure_step`)."""
    module, x = build_config(kind, cfg)
    trace = measure_step(
        module,
        x,
        optimizer=optimizer,
        precision=precision,
        min_block_ms=min_block_ms,
        repeats=repeats,
        warmup=warmup,
        input_grad=x.is_floating_point(),
    )
    return trace.frame().with_columns(
        pl.lit(config_id(kind, cfg)).alias("config_id"),
        pl.lit(kind).alias("kind"),
        pl.lit(json.dumps(cfg, sort_keys=True)).alias("config"),
        pl.lit(optimizer).alias("optimizer"),
        pl.lit(precision).alias("precision"),
    )
