"""Analytic FLOPs and bytes of the layer registry, checked against torch's FlopCounterMode."""

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from prenet.layers import REGISTRY, direction_flops
from prenet.layers.conv2d import output_size
from prenet.measurement.steps import make_step

CASES = {
    "linear": [{"batch": 7, "in_features": 33, "out_features": 17}, {"batch": 64, "in_features": 512, "out_features": 1000}],
    "conv2d": [
        {"batch": 2, "in_channels": 3, "out_channels": 8, "kernel_size": 3, "input_size": 16, "stride": 1, "padding": 1},
        {"batch": 4, "in_channels": 16, "out_channels": 5, "kernel_size": 5, "input_size": 23, "stride": 2, "padding": 0},
        {"batch": 1, "in_channels": 7, "out_channels": 9, "kernel_size": 7, "input_size": 12, "stride": 2, "padding": 3},
    ],
}


def _counted(op, cfg, direction):
    lt = REGISTRY[op]
    module, x = lt.build(cfg, "cpu", torch.float32)
    step = make_step(module, x, direction, "sgd" if direction == "train_step" else "none")
    with FlopCounterMode(display=False) as fc:
        step()
    return fc.get_total_flops()


@pytest.mark.parametrize("op,cfg", [(op, c) for op, cs in CASES.items() for c in cs])
@pytest.mark.parametrize("direction", ["forward", "forward_backward"])
def test_analytic_flops_match_flop_counter(op, cfg, direction):
    lt = REGISTRY[op]
    cost = lt.cost(lt.complete(cfg), 4)
    assert direction_flops(cost, direction, "none") == pytest.approx(_counted(op, cfg, direction), rel=1e-9)


@pytest.mark.parametrize("op,cfg", [(op, c) for op, cs in CASES.items() for c in cs])
def test_bytes_match_tensor_sizes(op, cfg):
    lt = REGISTRY[op]
    module, x = lt.build(cfg, "cpu", torch.float32)
    with torch.no_grad():
        y = module(x)
    cost = lt.cost(lt.complete(cfg), 4)
    assert cost.input_bytes == x.numel() * 4
    assert cost.output_bytes == y.numel() * 4
    assert cost.weight_bytes == sum(p.numel() for p in module.parameters()) * 4
    assert cost.params == sum(p.numel() for p in module.parameters())


def test_conv_output_size_matches_torch():
    for h, k, s, p in [(16, 3, 1, 1), (23, 5, 2, 0), (12, 7, 2, 3), (5, 5, 1, 0)]:
        y = torch.nn.functional.conv2d(torch.zeros(1, 1, h, h), torch.zeros(1, 1, k, k), stride=s, padding=p)
        assert y.shape[-1] == output_size(h, k, s, p)


@pytest.mark.parametrize("op", sorted(REGISTRY))
def test_sampler_respects_the_configured_space_and_caps(op):
    """Every registered op has a space in the real default benchmark config, and samples stay inside it."""
    from omegaconf import OmegaConf

    from pipeline.config import compose

    space = OmegaConf.to_container(compose([]).benchmark.ops[op].space)
    lt = REGISTRY[op]
    rng = np.random.default_rng(0)
    for _ in range(30):
        cfg = lt.complete(lt.sample(rng, space))
        cost = lt.cost(cfg, 4)
        if "max_flops" in space:
            assert cost.forward_flops <= space["max_flops"]
        if "max_elements" in space:
            assert cost.input_bytes / 4 <= space["max_elements"]
        if "max_params" in space:
            assert cost.params <= space["max_params"]
        for k, v in space.items():
            if k.startswith("max_") or k not in cfg:
                continue
            if k in ("kernel_size", "stride", "num_heads"):
                assert cfg[k] in v, (k, cfg)
            else:
                assert v[0] <= cfg[k] <= v[1], (k, cfg)


def test_schema_shape_columns_match_the_registry():
    from prenet.data.schemas import _Shapes
    from prenet.layers import ALL_SHAPE_COLUMNS

    assert set(_Shapes.to_schema().columns) == set(ALL_SHAPE_COLUMNS)


def _reference_rnn_flops(kind, cfg):
    """Count the gate matmuls of a hand-written recurrence with FlopCounterMode."""
    g = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    b, t, i, h = cfg["batch"], cfg["seq_len"], cfg["in_features"], cfg["hidden_size"]
    w_ih, w_hh = torch.randn(g * h, i), torch.randn(g * h, h)
    x, state = torch.randn(b, t, i), torch.zeros(b, h)
    with FlopCounterMode(display=False) as fc:
        for s in range(t):
            gates = x[:, s] @ w_ih.T + state @ w_hh.T
            state = torch.tanh(gates[:, :h])
    return fc.get_total_flops()


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_recurrent_flops_match_an_explicit_recurrence(kind):
    cfg = {"batch": 3, "seq_len": 5, "in_features": 7, "hidden_size": 11}
    assert REGISTRY[kind].cost(cfg, 4).forward_flops == _reference_rnn_flops(kind, cfg)
    module, x = REGISTRY[kind].build(cfg, "cpu", torch.float32)
    assert REGISTRY[kind].cost(cfg, 4).params == sum(p.numel() for p in module.parameters())


def _reference_attention_flops(cfg):
    """Count an explicit self-attention (projections, scores, weighted sum) with FlopCounterMode."""
    b, t, e, h = cfg["batch"], cfg["seq_len"], cfg["embed_dim"], cfg["num_heads"]
    x, w_in, w_out = torch.randn(b, t, e), torch.randn(e, 3 * e), torch.randn(e, e)
    with FlopCounterMode(display=False) as fc:
        q, k, v = (x @ w_in).split(e, dim=-1)
        q, k, v = (z.reshape(b, t, h, e // h).transpose(1, 2) for z in (q, k, v))
        o = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        o.transpose(1, 2).reshape(b, t, e) @ w_out
    return fc.get_total_flops()


@pytest.mark.parametrize(
    "cfg", [{"batch": 2, "seq_len": 9, "embed_dim": 16, "num_heads": 4}, {"batch": 3, "seq_len": 4, "embed_dim": 24, "num_heads": 2}]
)
def test_attention_flops_match_an_explicit_attention(cfg):
    cost = REGISTRY["mha"].cost(cfg, 4)
    assert cost.forward_flops == _reference_attention_flops(cfg)
    module, x = REGISTRY["mha"].build(cfg, "cpu", torch.float32)
    assert cost.params == sum(p.numel() for p in module.parameters())
    # torch's fused CPU attention kernel is invisible to FlopCounterMode; what it does see is the projections
    with FlopCounterMode(display=False) as fc:
        module(x)
    b, t, e = cfg["batch"], cfg["seq_len"], cfg["embed_dim"]
    assert fc.get_total_flops() in (8 * b * t * e * e, cost.forward_flops)


SMALL_CFGS = {
    "embedding": {"batch": 2, "seq_len": 5, "num_embeddings": 50, "embedding_dim": 8},
    "batchnorm2d": {"batch": 2, "channels": 3, "input_size": 6},
    "maxpool2d": {"batch": 2, "channels": 3, "input_size": 7, "kernel_size": 2, "stride": 2},
    "avgpool2d": {"batch": 2, "channels": 3, "input_size": 9, "kernel_size": 3, "stride": 1},
    **{op: {"batch": 4, "hidden": 10} for op in ("relu", "gelu", "tanh", "sigmoid", "dropout", "add", "softmax", "cross_entropy", "layernorm")},
}


@pytest.mark.parametrize("op", sorted(SMALL_CFGS))
@pytest.mark.parametrize("direction", ["forward", "forward_backward", "train_step"])
def test_every_op_runs_in_every_direction_with_matching_bytes(op, direction):
    lt = REGISTRY[op]
    cfg = lt.complete(SMALL_CFGS[op])
    module, x = lt.build(cfg, "cpu", torch.float32)
    with torch.no_grad():
        y = module(x)
    cost = lt.cost(cfg, 4)
    assert cost.output_bytes == y.numel() * 4
    assert cost.params == sum(p.numel() for p in module.parameters())
    if direction == "train_step" and cost.params == 0:
        return  # nothing to update: such ops are timed forward and forward_backward only
    make_step(module, x, direction, "adam" if direction == "train_step" else "none")()
