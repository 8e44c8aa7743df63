"""Image classifiers by the names users know (``torchvision:NAME``, ``timm:NAME``), built by the libraries themselves on
meta (issue 31)."""

from __future__ import annotations

import pytest

from prenet.errors import PrenetError
from prenet.user_models import build_model


@pytest.mark.parametrize(
    ("spec", "sizes", "params", "image", "rows"),
    [
        # published parameter counts: torchvision's weights tables, timm's model cards
        ("torchvision:resnet50", None, 25_557_032, 224, 2),
        ("torchvision:inception_v3", None, 27_161_264, 299, 2),  # its auxiliary head runs too, weighted 0
        ("torchvision:googlenet", None, 13_004_888, 224, 2),  # two auxiliary heads
        ("torchvision:regnet_y_400mf", None, 4_344_144, 224, 2),  # widths computed with tensors: weights moved to meta
        ("torchvision:vit_h_14", None, 632_045_800, 224, 2),  # published only with SWAG's 518 px weights: trains at 224
        ("torchvision:convnext_tiny", None, 28_589_128, 224, 2),
        ("torchvision:vit_b_16", {"image_size": 384}, 86_859_496, 384, 2),  # built for the asked size: 577 positions
        ("timm:convnext_tiny", None, 28_589_128, 224, 2),
        ("timm:efficientnet_b3", None, 12_233_232, 288, 2),  # timm's training size for B3
        ("timm:resnet50", {"classes": 10}, 23_528_522, 224, 2),
    ],
)
def test_image_models_build_as_published_on_meta(spec, sizes, params, image, rows):
    """``rows``: the logits the loss sees (the main head's, also where auxiliary heads run)."""
    module, (x, y) = build_model(spec, 2, sizes)
    assert sum(p.numel() for p in module.parameters()) == params
    assert next(module.parameters()).device.type == "meta"
    assert tuple(x.shape) == (2, 3, image, image) and tuple(y.shape) == (rows,)
    assert module(x).shape[0] == rows


def test_unknown_image_models_and_sizes_get_one_line():
    for spec, sizes, message in [
        ("torchvision:resnet51", None, "closest: resnet50"),
        ("timm:convnext_tinyy", None, "closest: convnext_tiny"),
        ("torchvision:fasterrcnn_resnet50_fpn", None, "not a torchvision classification model"),
        ("torchvision:resnet50", {"depth": 3}, "does not take depth"),
        ("torchvision:maxvit_t", {"image_size": 256}, "cannot be built for 256² images: .*partition size 7"),
        ("resnet5", None, "closest zoo names: resnet50"),
    ]:
        with pytest.raises(PrenetError, match=message):
            build_model(spec, 1, sizes)


def test_the_rebuilt_torchvision_family_traces_as_torchvision_does():
    """The pytorch-gpu-benchmark evaluation answers with prenet's rebuilt CNNs (no torchvision needed there): they trace
    the same training step as torchvision's own models, op for op, with the same FLOPs and bytes (torchvision adds a
    residual in place, ``add_``, where the rebuild writes ``add``: the same traffic)."""
    from functools import partial

    from prenet.meta_device import build_on_meta
    from prenet.ops.trace import trace_step
    from prenet.reference_models import torchvision_model

    for name in ("resnet50", "vgg11", "densenet121"):
        rebuilt = trace_step(*build_on_meta(partial(torchvision_model, name), batch_size=2), device_type="cuda")
        real = trace_step(*build_model(f"torchvision:{name}", 2), device_type="cuda")
        assert rebuilt.params == real.params
        assert sorted((r.op.rstrip("_"), r.phase) for r in rebuilt.records) == sorted((r.op.rstrip("_"), r.phase) for r in real.records)
        for measure in ("flops", "bytes"):
            assert sum(getattr(r, measure) for r in rebuilt.records) == sum(getattr(r, measure) for r in real.records)


def test_image_models_are_real_for_a_forecast():
    module, (x, _) = build_model("timm:resnet18", 2, {"image_size": 64, "classes": 10}, meta=False)
    assert next(module.parameters()).device.type == "cpu" and module(x).shape == (2, 10)


def test_auxiliary_heads_run_forward_and_backward_in_training_only():
    """GoogLeNet's two auxiliary heads are part of a training step's trace (forward and backward), not of an eval-mode
    forward; either way the loss sees the main head's logits against the batch's labels."""
    from prenet.ops.trace import trace_step

    module, batch = build_model("torchvision:googlenet", 2)
    aux = {r.phase for r in trace_step(module, batch, device_type="cuda").records if r.module.startswith("net.aux")}
    assert aux >= {"forward", "backward"}
    module.eval()
    assert module(batch[0]).shape == (2, 1000)


def test_weights_move_to_meta_as_registered_and_tied_weights_stay_tied():
    """The fallback for builders that compute with tensors: parameters and buffers become meta copies as they are
    registered, one copy per tensor, so tied weights stay one parameter."""
    import torch

    from prenet.image_models import _weights_on_meta

    with _weights_on_meta():
        emb = torch.nn.Embedding(50, 8)
        head = torch.nn.Linear(8, 50, bias=False)
        head.weight = emb.weight
        net = torch.nn.Sequential(emb, torch.nn.BatchNorm1d(8), head)
        shared = torch.nn.Parameter(torch.empty(3, 3))  # one CPU parameter registered on two modules
        a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
        a.weight, b.weight = shared, shared
    assert a.weight.is_meta and a.weight is b.weight
    assert all(p.is_meta for p in net.parameters()) and all(b.is_meta for b in net.buffers())
    assert sum(p.numel() for p in net.parameters()) == 50 * 8 + 2 * 8  # the tied matrix counted once
    assert not torch.nn.Linear(2, 2).weight.is_meta  # the hooks are gone once the context closes


def test_model_names_list_what_model_takes(capsys):
    """``prenet models SOURCE [PATTERN]`` lists the specs ``--model`` takes, and each one listed builds."""
    from pipeline.cli import main
    from prenet.user_models import model_names

    assert "resnet50" in model_names("zoo") and model_names("torchvision", "resnet5*") == ["torchvision:resnet50"]
    assert "timm:convnext_tiny" in model_names("timm", "convnext_t*") and "hf:gpt2" in model_names("hf", "gpt2")
    assert main(["models", "timm", "convnext_tiny"]) == 0
    assert capsys.readouterr().out.split() == ["timm:convnext_tiny"]
    with pytest.raises(PrenetError, match="unknown model source 'keras'"):
        model_names("keras")
