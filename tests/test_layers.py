"""Analytic FLOPs and bytes of the layer registry, checked against torch's FlopCounterMode."""

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from prenet.benchmark.steps import make_step
from prenet.layers import REGISTRY, direction_flops
from prenet.layers.conv2d import output_size

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
def test_sampler_respects_space_and_flops_cap(op):
    space = {
        "linear": {"batch": [1, 64], "in_features": [8, 512], "out_features": [8, 512], "max_flops": 1e7},
        "conv2d": {"batch": [1, 8], "in_channels": [1, 32], "out_channels": [1, 32], "kernel_size": [1, 3, 5],
                   "input_size": [4, 32], "stride": [1, 2], "max_flops": 1e7},
    }[op]
    lt = REGISTRY[op]
    rng = np.random.default_rng(0)
    for _ in range(50):
        cfg = lt.complete(lt.sample(rng, space))
        assert lt.cost(cfg, 4).forward_flops <= 1e7
        for k, v in space.items():
            if k == "max_flops":
                continue
            if k in ("kernel_size", "stride"):
                assert cfg[k] in v
            else:
                assert v[0] <= cfg[k] <= v[1]
