"""Sequence layers on [batch, seq_len, features] inputs: RNN / LSTM / GRU (one layer, unidirectional,
batch-first), multi-head self-attention, and token embeddings."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prenet.layers.base import LayerCost, LayerType, cap, log_uniform_int, redraw

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
_RNN_CLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class RecurrentLayer(nn.Module):
    """One recurrent layer returning its output sequence only (the hidden state is dropped)."""

    def __init__(self, kind: str, in_features: int, hidden_size: int):
        super().__init__()
        self.rnn = _RNN_CLS[kind](in_features, hidden_size, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class SelfAttention(nn.Module):
    """``nn.MultiheadAttention`` used as self-attention (query = key = value), output only."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


def _capped(space: dict[str, Any], draw, flops) -> dict[str, int]:
    return redraw(draw, lambda c: flops(c) <= cap(space, "max_flops"), f"space {space} admits no configuration under max_flops")


# ---- recurrent ----------------------------------------------------------------------------------------------


def _rnn_type(kind: str) -> LayerType:
    g = GATES[kind]

    def cost(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
        """Per step: the gate matmuls, 2·batch·gates·hidden·(in + hidden) FLOPs (gate non-linearities not counted)."""
        b, t, i, h = cfg["batch"], cfg["seq_len"], cfg["in_features"], cfg["hidden_size"]
        params = g * h * (i + h) + 2 * g * h
        return LayerCost(
            forward_flops=2.0 * b * t * g * h * (i + h),
            params=params,
            weight_bytes=params * dtype_bytes,
            input_bytes=b * t * i * dtype_bytes,
            output_bytes=b * t * h * dtype_bytes,
        )

    def sample(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
        return _capped(
            space,
            lambda: {
                "batch": log_uniform_int(rng, *space["batch"]),
                "seq_len": log_uniform_int(rng, *space["seq_len"]),
                "in_features": log_uniform_int(rng, *space["in_features"]),
                "hidden_size": log_uniform_int(rng, *space["hidden_size"]),
            },
            lambda c: cost(c, 4).forward_flops,
        )

    def build(cfg, device, dtype):
        m = RecurrentLayer(kind, cfg["in_features"], cfg["hidden_size"]).to(device=device, dtype=dtype)
        return m, torch.randn(cfg["batch"], cfg["seq_len"], cfg["in_features"], device=device, dtype=dtype)

    return LayerType(op=kind, shape_columns=("batch", "seq_len", "in_features", "hidden_size"), sample=sample, build=build, cost=cost)


RNN, LSTM, GRU = _rnn_type("rnn"), _rnn_type("lstm"), _rnn_type("gru")


# ---- attention ----------------------------------------------------------------------------------------------


def cost_mha(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """Q/K/V and output projections 8·B·L·E², scores and weighted sum 4·B·L²·E (softmax not counted)."""
    b, t, e = cfg["batch"], cfg["seq_len"], cfg["embed_dim"]
    params = 4 * e * e + 4 * e
    return LayerCost(
        forward_flops=8.0 * b * t * e * e + 4.0 * b * t * t * e,
        params=params,
        weight_bytes=params * dtype_bytes,
        input_bytes=b * t * e * dtype_bytes,
        output_bytes=b * t * e * dtype_bytes,
    )


def sample_mha(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    def draw():
        heads = int(rng.choice(space["num_heads"]))
        head_dim = log_uniform_int(rng, *space["head_dim"])
        return {
            "batch": log_uniform_int(rng, *space["batch"]),
            "seq_len": log_uniform_int(rng, *space["seq_len"]),
            "embed_dim": heads * head_dim,
            "num_heads": heads,
        }

    return _capped(space, draw, lambda c: cost_mha(c, 4).forward_flops)


def build_mha(cfg, device, dtype):
    m = SelfAttention(cfg["embed_dim"], cfg["num_heads"]).to(device=device, dtype=dtype)
    return m, torch.randn(cfg["batch"], cfg["seq_len"], cfg["embed_dim"], device=device, dtype=dtype)


MHA = LayerType(op="mha", shape_columns=("batch", "seq_len", "embed_dim", "num_heads"), sample=sample_mha, build=build_mha, cost=cost_mha)


# ---- embedding ----------------------------------------------------------------------------------------------


def cost_embedding(cfg: dict[str, int], dtype_bytes: int) -> LayerCost:
    """A gather: no FLOPs; reads the looked-up rows, writes [batch, seq_len, embedding_dim]."""
    b, t, v, d = cfg["batch"], cfg["seq_len"], cfg["num_embeddings"], cfg["embedding_dim"]
    return LayerCost(forward_flops=0.0, params=v * d, weight_bytes=v * d * dtype_bytes, input_bytes=b * t * 8, output_bytes=b * t * d * dtype_bytes)


def sample_embedding(rng: np.random.Generator, space: dict[str, Any]) -> dict[str, int]:
    return redraw(
        lambda: {
            "batch": log_uniform_int(rng, *space["batch"]),
            "seq_len": log_uniform_int(rng, *space["seq_len"]),
            "num_embeddings": log_uniform_int(rng, *space["num_embeddings"]),
            "embedding_dim": log_uniform_int(rng, *space["embedding_dim"]),
        },
        lambda c: c["num_embeddings"] * c["embedding_dim"] <= cap(space, "max_params"),
        f"space {space} admits no configuration under max_params",
    )


def build_embedding(cfg, device, dtype):
    m = nn.Embedding(cfg["num_embeddings"], cfg["embedding_dim"]).to(device=device, dtype=dtype)
    return m, torch.randint(0, cfg["num_embeddings"], (cfg["batch"], cfg["seq_len"]), device=device)


EMBEDDING = LayerType(
    op="embedding",
    shape_columns=("batch", "seq_len", "num_embeddings", "embedding_dim"),
    sample=sample_embedding,
    build=build_embedding,
    cost=cost_embedding,
)
