"""What every benchmarkable layer type provides: its shape columns, a sampler over its configuration
space, a builder (module + input on a device) and its analytic cost (FLOPs, bytes).

Directions (what one timed iteration does):

* ``forward`` — inference forward under ``torch.no_grad()``;
* ``forward_backward`` — forward with autograd, then backward to weights *and* input
  (the input requires grad, as inside a network);
* ``train_step`` — ``forward_backward`` followed by ``optimizer.step()`` (``sgd`` or ``adam``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from prenet.errors import ConfigError

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}

#: FLOPs of a direction as a multiple of the forward FLOPs: backward computes the input gradient and the
#: weight gradient, each costing about one forward.
DIRECTION_FLOP_FACTOR: dict[str, float] = {"forward": 1.0, "forward_backward": 3.0, "train_step": 3.0}
#: Optimizer-update FLOPs per parameter (SGD: p -= lr·g; Adam: two moment updates, bias correction, sqrt, div).
OPTIMIZER_FLOPS_PER_PARAM: dict[str, float] = {"none": 0.0, "sgd": 2.0, "adam": 12.0}
#: Optimizer-update bytes moved per parameter, in units of the dtype size (read p, g [, m, v]; write p [, m, v]).
OPTIMIZER_WORDS_PER_PARAM: dict[str, float] = {"none": 0.0, "sgd": 3.0, "adam": 7.0}


@dataclass(frozen=True)
class LayerCost:
    """Analytic cost of one forward pass (FLOPs) and its memory footprint (bytes)."""

    forward_flops: float
    params: int
    weight_bytes: int
    input_bytes: int
    output_bytes: int


#: Configurations a sampler draws before it calls its space empty.
MAX_DRAWS = 1000


def cap(space: dict[str, Any], key: str) -> float:
    """A space's cap ``key`` (``max_flops``, ``max_elements``, ``max_params``); none set: no cap."""
    return float(space.get(key, float("inf")))


def redraw(draw: Callable[[], dict[str, int] | None], fits: Callable[[dict[str, int]], bool], empty: str) -> dict[str, int]:
    """The first configuration ``draw()`` gives that ``fits`` (a draw of None is invalid), within ``MAX_DRAWS`` draws;
    :class:`~prenet.errors.ConfigError` ``empty`` (what was wrong and how to fix it) when none does."""
    for _ in range(MAX_DRAWS):
        cfg = draw()
        if cfg is not None and fits(cfg):
            return cfg
    raise ConfigError(empty)


def log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer drawn log-uniformly from [lo, hi]."""
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def width(rng: np.random.Generator, bounds: list[int], powers_of_two: bool = False) -> int:
    """A layer width drawn log-uniformly from ``bounds``; with ``powers_of_two`` rounded to the nearest power of two
    within them, as most networks set their widths (a CPU's GEMM over rows of a power-of-two stride can run several
    times slower: the rows alias in the cache sets; 16x1024 @ 1024x1024 in BF16 without BF16 units 0.97 GFLOP/s,
    16x1000 @ 1000x1000 1.64, AMD EPYC 2026-12-06)."""
    c = log_uniform_int(rng, *bounds)
    if not powers_of_two:
        return c
    lo, hi = 2 ** math.ceil(math.log2(bounds[0])), 2 ** math.floor(math.log2(bounds[1]))  # the powers within bounds
    if lo > hi:
        raise ConfigError(f"powers_of_two: no power of two within {bounds}; widen the bounds or drop powers_of_two")
    return int(min(max(2 ** round(math.log2(c)), lo), hi))


@dataclass(frozen=True)
class LayerType:
    """A registry entry: everything prenet knows about one layer type."""

    op: str
    #: Shape columns of this op, in the order of the ``prenet predict layers`` CSV format.
    shape_columns: tuple[str, ...]
    #: Draws one configuration (a dict over ``shape_columns``) from the space described by ``space``.
    sample: Callable[[np.random.Generator, dict[str, Any]], dict[str, int]]
    #: Builds the module and an input batch on ``device`` for a configuration.
    build: Callable[[dict[str, int], str, torch.dtype], tuple[nn.Module, torch.Tensor]]
    #: Analytic cost of a configuration for a dtype size in bytes.
    cost: Callable[[dict[str, int], int], LayerCost]
    #: False for ops without parameters: they have no ``train_step`` (their step is ``forward_backward``).
    trainable: bool = True
    #: Names of the derived shape columns (e.g. conv ``output_size``) and the function computing them.
    derived_columns: tuple[str, ...] = ()
    derive: Callable[[dict[str, int]], dict[str, int]] = lambda cfg: {}

    @property
    def all_columns(self) -> tuple[str, ...]:
        """Shape columns followed by derived columns."""
        return (*self.shape_columns, *self.derived_columns)

    def complete(self, cfg: dict[str, int]) -> dict[str, int]:
        """The configuration with its derived columns filled in."""
        base = {k: int(cfg[k]) for k in self.shape_columns}
        return {**base, **self.derive(base)}


def direction_flops(cost: LayerCost, direction: str, optimizer: str) -> float:
    """FLOPs of one iteration in ``direction`` (see module docstring)."""
    flops = cost.forward_flops * DIRECTION_FLOP_FACTOR[direction]
    if direction == "train_step":
        flops += OPTIMIZER_FLOPS_PER_PARAM[optimizer] * cost.params
    return flops


def direction_bytes(cost: LayerCost, direction: str, optimizer: str, dtype_bytes: int) -> float:
    """Bytes moved through memory by one iteration: each tensor read or written once per pass
    (forward: weights + input + output; backward adds reading them again and writing both gradients)."""
    once = cost.weight_bytes + cost.input_bytes + cost.output_bytes
    moved = once if direction == "forward" else 3 * once
    if direction == "train_step":
        moved += OPTIMIZER_WORDS_PER_PARAM[optimizer] * cost.params * dtype_bytes
    return float(moved)
