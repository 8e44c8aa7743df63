"""Walking models into registry layers on the meta device."""

from collections import Counter

import pytest
import torch
from torch import nn

from prenet.errors import PrenetError
from prenet.graph import walk
from prenet.layers import REGISTRY
from prenet.zoo import ZOO


def _ops(calls):
    return Counter(c.op for c in calls)


def test_resnet18_layers_including_functional_residual_adds():
    with torch.device("meta"):
        m, (x, _) = ZOO["resnet18"](batch_size=4)
    ops = _ops(walk(m, x))
    assert ops["conv2d"] == 20 and ops["batchnorm2d"] == 20 and ops["add"] == 8 and ops["linear"] == 1
    assert ops["maxpool2d"] == 1 and ops["avgpool2d"] == 1


def test_walk_uses_no_weight_memory_and_leaves_the_model_alone():
    m, (x, _) = ZOO["mlp"](batch_size=8)
    before = [p.clone() for p in m.parameters()]
    calls = walk(m, x)
    assert [c.op for c in calls] == ["linear", "relu", "linear", "relu", "linear", "relu", "linear"]
    assert all(p.device.type == "cpu" for p in m.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    assert calls[0].shape["batch"] == 8 and calls[0].shape["in_features"] == 784


def test_transformer_attention_is_one_call_not_its_projections():
    with torch.device("meta"):
        m, (x, _) = ZOO["bert_base_like"](batch_size=2, layers=1, seq_len=16)
    calls = walk(m, x)
    mha = [c for c in calls if c.op == "mha"]
    assert len(mha) == 1 and mha[0].shape == {"batch": 2, "seq_len": 16, "embed_dim": 768, "num_heads": 12}
    assert _ops(calls)["linear"] == 3  # two feed-forward layers and the classifier, not the attention's out_proj


def test_stacked_lstm_becomes_one_call_per_layer():
    with torch.device("meta"):
        m, (x, _) = ZOO["lstm_lm"](batch_size=3, layers=2, seq_len=5)
    lstm = [c for c in walk(m, x) if c.op == "lstm"]
    assert [c.shape["in_features"] for c in lstm] == [256, 512]


#: The zoo models the layer walker (the PreNeT-recipe baseline) covers; the op-level tracer takes every zoo model
#: (tests/test_ops.py), the walker refuses depthwise convolutions, Conv1d, GroupNorm and module-owned parameters.
WALKABLE = ("mlp", "vgg16", "resnet18", "resnet50", "lstm_lm", "bert_base_like", "gpt2_small_like")


def test_every_zoo_model_walks_into_registered_ops():
    for name in WALKABLE:
        build = ZOO[name]
        with torch.device("meta"):
            m, (x, _) = build(batch_size=2)
        calls = walk(m, x)
        assert calls and all(c.op in REGISTRY for c in calls), name


def test_unknown_parameterised_layer_is_named():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.w

    with pytest.raises(PrenetError, match="Odd"):
        walk(nn.Sequential(nn.Linear(3, 3), Odd()), torch.zeros(2, 3))
