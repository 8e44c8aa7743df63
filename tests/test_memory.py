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


def test_an_autocast_step_counts_its_activations_at_their_dtypes():
    for opt in ("sgd", "adam"):
        net, batch = _convnet()
        fp32 = predict_training_memory(net, batch, opt)
        bf16 = predict_training_memory(net, batch, opt, precision="bf16", device_type="cpu")
        measured = measure_training_memory(net, batch, opt, precision="bf16")  # under torch.autocast("cpu")
        assert 0.75 < measured / bf16.total_bytes < 1.25, (opt, measured, bf16.total_bytes)
        # FP32 master weights, gradients and optimizer state; 16-bit GEMM/convolution inputs and weight copies saved
        assert (bf16.weights_bytes, bf16.gradients_bytes, bf16.optimizer_bytes) == (fp32.weights_bytes, fp32.gradients_bytes, fp32.optimizer_bytes)
        assert bf16.activations_bytes < 0.7 * fp32.activations_bytes
    assert predict_training_memory(net, batch, "adam", precision="tf32").total_bytes == fp32.total_bytes  # TF32 stores FP32


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


def _estimate(weights_gib: float, optimizer_buffers: int, activations_gib: float):
    from prenet.memory.estimate import MemoryEstimate

    w, a = int(weights_gib * GIB), int(activations_gib * GIB)
    return MemoryEstimate(w, w, optimizer_buffers * w, 0, a, a + w, 0)


def test_the_advice_for_a_step_that_does_not_fit_offers_only_what_the_job_can_still_change():
    from prenet.memory.estimate import fit_advice

    big_acts = _estimate(1, 2, 30)  # 4 GiB of model state, 30 GiB of activations, on a 16 GiB card
    first = fit_advice(big_acts, 16, batch_size=32, checkpointing=False, precision="fp32", low_precisions=("fp16",))
    assert "--batch-size" in first and "--checkpointing" in first and first.endswith("larger hardware")
    assert "--precision fp16 (16-bit" in first and "bf16" not in first  # only what the card runs (a T4: no BF16)
    assert "fsdp" not in first  # sharding the 4 GiB of state cannot make room for 30 GiB of activations
    last = fit_advice(big_acts, 16, batch_size=1, checkpointing=True, precision="bf16")
    assert last == "use larger hardware"  # batch 1, checkpointed, 16-bit: nothing left but the hardware
    assert "--batch-size" not in fit_advice(big_acts, 16, batch_size=1, checkpointing=False, precision="bf16")
    # a 7 B-parameter model with Adam on an 80 GiB card: its state alone (104 GiB) overflows, whatever the batch
    llm = _estimate(26, 2, 10)
    advice = fit_advice(llm, 80, batch_size=4, checkpointing=False, precision="bf16")
    assert advice.startswith("its weights, gradients and optimizer state alone take 104.0 GiB; use --gpus 2 --parallel fsdp")
    assert "--batch-size" not in advice and "--checkpointing" not in advice
    # already on 8 GPUs under FSDP: 13 GiB of that state a GPU, so the activations are what to cut, not the GPUs to add
    on8 = fit_advice(_estimate(26, 2, 75), 80, batch_size=4, checkpointing=False, precision="bf16", shards=8)
    assert "fsdp" not in on8 and "alone take" not in on8 and "--batch-size" in on8 and "--checkpointing" in on8
    # a small batch through a large model: autocast's 16-bit weight copies would outweigh the activations it halves
    small_batch = fit_advice(_estimate(5, 2, 4), 24, batch_size=2, checkpointing=False, precision="fp32")
    assert "--checkpointing" in small_batch and "--precision" not in small_batch
