"""Peak training memory: the prediction from the model alone against a measured step on the CPU."""

from __future__ import annotations

import torch
from torch import nn

from prenet.memory.estimate import GIB, fits
from prenet.memory.training import measure_training_memory, predict_training_memory, trace_saved


def _convnet(batch: int = 32):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 16 * 16, 10),
    )
    return net, (torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,)))


def test_prediction_matches_a_measured_step_within_25_percent():
    for opt in ("sgd", "adam"):
        net, batch = _convnet()
        measured = measure_training_memory(net, batch, opt)
        predicted = predict_training_memory(net, batch, opt).total_bytes
        assert 0.75 < measured / predicted < 1.25, (opt, measured, predicted)


def test_components_scale_as_they_should():
    net, batch = _convnet(8)
    sgd = predict_training_memory(net, batch, "sgd")
    adam = predict_training_memory(net, batch, "adam")
    mom = predict_training_memory(net, batch, "sgd_momentum")
    params = sum(p.numel() for p in net.parameters()) * 4
    assert sgd.weights_bytes == sgd.gradients_bytes == params and sgd.optimizer_bytes == 0
    assert mom.optimizer_bytes == params and adam.optimizer_bytes == 2 * params
    big = predict_training_memory(*_convnet(64), "sgd")
    assert 7.5 < big.activations_bytes / sgd.activations_bytes < 8.5  # activations grow with the batch, weights do not
    assert big.weights_bytes == sgd.weights_bytes


def test_saved_tensors_are_traced_on_meta_without_allocating():
    with torch.device("meta"):
        net, batch = _convnet(16)
    sizes, uses = trace_saved(net, batch)
    # conv1 input, its output (saved by batch norm), relu output, maxpool indices, conv2 input, relu, flatten/linear input, log-softmax
    assert len(sizes) >= 6 and all(s > 0 for s in sizes)
    assert len(uses) == 4 and [pos for pos, _ in uses] == sorted(pos for pos, _ in uses)  # conv, bn, conv, linear, in call order
    assert all(p.device.type == "meta" for p in net.parameters())


def test_fits_leaves_room_for_the_runtime():
    assert fits(7 * GIB, 8, reserve_gib=1.0) is True
    assert fits(7.5 * GIB, 8, reserve_gib=1.0) is False
    assert fits(1, None) is None


def test_the_advice_for_a_step_that_does_not_fit_offers_only_what_the_job_can_still_change():
    from prenet.memory.estimate import fit_advice

    first = fit_advice(32, checkpointing=False, precision="fp32")
    assert "--batch-size" in first and "--checkpointing" in first and "--precision" in first and first.endswith("larger hardware")
    last = fit_advice(1, checkpointing=True, precision="bf16")
    assert last == "use larger hardware"  # batch 1, checkpointed, 16-bit: nothing left but the hardware
    assert "--batch-size" not in fit_advice(1, checkpointing=False, precision="bf16")
