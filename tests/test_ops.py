"""The op-level step-time path: tracing any model, autocast on meta, FLOPs, bounded predictions, precision errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from prenet import zoo
from prenet.errors import PrenetError
from prenet.hardware.catalog import get
from prenet.ops import measure_step, trace_step
from prenet.ops.families import base_name
from prenet.steptime.efficiency import EfficiencyModel, UnsupportedPrecisionError
from prenet.steptime.step import predict_trace

MUST_WORK = ["mobilenet_v2_like", "vit_tiny", "audio_cnn1d", "unet_block", "lstm_lm", "gru_tagger", "gpt_sdpa", "functional_mlp"]


def _meta(name: str, batch: int = 4):
    with torch.device("meta"):
        return zoo.build(name, batch)


@pytest.mark.parametrize("name", MUST_WORK)
def test_every_required_architecture_decomposes_in_every_precision(name):
    module, batch = _meta(name)
    for precision, device in (("fp32", "cpu"), ("bf16", "cpu"), ("fp16", "cuda"), ("tf32", "cuda")):
        trace = trace_step(module, batch, precision=precision, device_type=device, optimizer="adam")
        phases = {r.phase for r in trace.records}
        assert {"forward", "backward", "optimizer"} <= phases
        assert all(r.bytes >= 0 and r.flops >= 0 for r in trace.records)
        assert sum(r.flops for r in trace.records if r.family in ("gemm", "conv", "conv_depthwise", "conv_grouped", "rnn")) > 0


def test_module_paths_label_forward_and_backward_ops():
    module, batch = _meta("mobilenet_v2_like")
    recs = trace_step(module, batch).records
    dw = [r for r in recs if r.family == "conv_depthwise"]
    assert dw and {r.phase for r in dw} == {"forward", "backward"}
    assert all(r.module not in ("(backward)", "(top)") for r in dw)


def _dtypes(module, x, y, real: bool):
    class Rec(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if (
                isinstance(out, torch.Tensor)
                and out.is_floating_point()
                and base_name(func) in ("addmm", "mm", "native_layer_norm", "_softmax", "_log_softmax")
            ):
                self.ops.append((base_name(func), out.dtype))
            return out

    from prenet.ops.autocast import Autocast

    rec = Rec()
    with rec, torch.autocast("cpu", dtype=torch.bfloat16) if real else Autocast("cpu", torch.bfloat16):
        torch.nn.functional.cross_entropy(module(x), y)
    return rec.ops


def test_meta_autocast_emulation_matches_real_cpu_autocast():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Softmax(-1), torch.nn.Linear(16, 4))
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    real = _dtypes(m, x, y, real=True)
    meta = _dtypes(m.to("meta"), x.to("meta"), y.to("meta"), real=False)
    assert real == meta and (("addmm", torch.bfloat16) in real)


def test_a_cpu_lstm_runs_its_fused_layer_in_bf16_under_autocast_as_torch_does():
    """torch's CPU autocast casts oneDNN's fused LSTM layer (``mkldnn_rnn_layer``) to BF16: the meta trace records it
    as a real measured step does, forward and backward."""

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.out = torch.nn.LSTM(16, 32, batch_first=True), torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.lstm(x)[0][:, -1])

    torch.manual_seed(0)
    batch = (torch.randn(2, 5, 16), torch.randint(0, 4, (2,)))
    rnn = lambda t: [(r.op, r.phase, r.dtype) for r in t.records if r.family == "rnn"]  # noqa: E731
    traced = rnn(trace_step(Tagger(), batch, precision="bf16", device_type="cpu", threads=1))
    measured = rnn(measure_step(Tagger(), batch, precision="bf16", warmup=False, min_block_ms=0.01, repeats=1))
    assert traced == measured and ("mkldnn_rnn_layer", "forward", "bfloat16") in traced


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_traced_lstm_layer_moves_the_workspace_the_real_one_writes(precision):
    """On ``meta`` oneDNN's LSTM workspace is empty; the trace counts the bytes the real layer writes and its backward
    reads (this oneDNN's size, read off the kernel), so a traced layer moves what the op benchmark's measured rows of
    it moved (within 5 %: the size is taken linear in the steps, and grows in uneven 4 KB pages)."""

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(24, 48, num_layers=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x)[0]

    lstm, batch = Encoder(), (torch.randn(20, 6, 24), torch.randn(20, 6, 48))
    rnn = lambda t: [(r.op, r.bytes) for r in t.records if r.family == "rnn"]  # noqa: E731
    traced = rnn(trace_step(lstm, batch, precision=precision, device_type="cpu", threads=1))
    measured = rnn(measure_step(lstm, batch, precision=precision, warmup=False, min_block_ms=0.01, repeats=1))
    assert [op for op, _ in traced] == [op for op, _ in measured] and len(traced) == 4
    for (_, t), (_, m) in zip(traced, measured):
        assert t == pytest.approx(m, rel=0.05)


def test_gemm_and_conv_flops_match_torch_flop_counter():
    module, batch = zoo.build("resnet18", 2, {"resnet18": {"image_size": 32}})
    recs = trace_step(module, batch).records
    ours = sum(r.flops for r in recs if r.family in ("gemm", "conv"))
    counter = FlopCounterMode(display=False)
    with counter:
        loss = torch.nn.functional.cross_entropy(module(batch[0]), batch[1])
        loss.backward()
    assert ours == pytest.approx(counter.get_total_flops(), rel=1e-6)


def test_measured_step_times_every_op_in_place():
    torch.manual_seed(0)
    module, batch = zoo.build("mlp", 8, {"mlp": {"hidden": 64, "in_features": 32}})
    trace = measure_step(module, batch, optimizer="sgd", min_block_ms=0.05, repeats=3)
    frame = trace.frame()
    assert frame.height > 5 and frame["measured_ms"].min() > 0
    assert set(frame["phase"].unique()) == {"forward", "backward", "optimizer"}


def _toy_model(cpu_ops: pl.DataFrame, hw) -> EfficiencyModel:
    return EfficiencyModel.fit([(cpu_ops, hw)], params={"n_estimators": 20, "max_depth": 3, "learning_rate": 0.3}, min_rows=5)


def test_predictions_never_beat_the_roofline_and_follow_the_spec():
    torch.manual_seed(0)
    module, batch = zoo.build("mlp", 16, {"mlp": {"hidden": 128, "in_features": 64}})
    from prenet.hardware.local import detect_cpu

    cpu = detect_cpu(1)
    measured = measure_step(module, batch, min_block_ms=0.05).frame()
    model = _toy_model(measured, cpu)
    pred = model.predict(measured, cpu)
    assert (pred["predicted_ms"] >= pred["roofline_ms"]).all()
    assert ((pred["efficiency"] > 0) & (pred["efficiency"] <= 1)).all()
    h100, h200 = get("H100 SXM5 80GB"), get("H200 SXM 141GB")
    trace = trace_step(*_meta("gpt_sdpa", 8), device_type="cuda", precision="bf16")
    p100, _ = predict_trace(trace, h100, model)
    p200, _ = predict_trace(trace, h200, model)
    assert p200.step_seconds <= p100.step_seconds  # same compute peaks, more bandwidth
    assert p100.estimate_share.get("roofline", 0) > 0  # no GPU data in this toy model: said, not hidden


def test_precision_the_hardware_lacks_is_one_clear_error():
    trace = trace_step(*_meta("mlp"), device_type="cuda", precision="bf16")
    model = EfficiencyModel()
    with pytest.raises(UnsupportedPrecisionError, match="V100 PCIe 16/32GB has no BF16 peak in its spec sheet"):
        predict_trace(trace, get("V100 PCIe 16/32GB"), model)
    with pytest.raises(PrenetError, match="unknown precision 'fp8'; choose one of fp32, tf32, fp16, bf16"):
        trace_step(*_meta("mlp"), precision="fp8")
    with pytest.raises(PrenetError, match="tf32 exists on NVIDIA GPUs only"):
        trace_step(*_meta("mlp"), precision="tf32", device_type="cpu")


def test_a_failing_forward_names_the_module():
    from collections import OrderedDict

    bad = torch.nn.Sequential(OrderedDict(encoder=torch.nn.Linear(8, 4), head=torch.nn.Linear(5, 2)))
    with pytest.raises(PrenetError, match=r"forward failed in head \("):
        trace_step(bad, torch.randn(2, 8))


def test_tensor_core_precision_changes_units_and_halves_activation_bytes():
    module, batch = _meta("gpt_sdpa")
    f32 = trace_step(module, batch, device_type="cuda")
    f16 = trace_step(module, batch, device_type="cuda", precision="fp16")
    assert {r.unit for r in f16.records if r.family == "gemm"} == {"fp16"}
    assert any(r.op == "_amp_foreach_non_finite_check_and_unscale_" for r in f16.records)
    gemm_bytes = lambda t: sum(r.bytes for r in t.records if r.family == "gemm" and r.phase == "forward")  # noqa: E731
    assert gemm_bytes(f16) < 0.6 * gemm_bytes(f32)


def test_cpu_attention_with_dropout_runs_the_math_as_torch_picks_it():
    """torch's CPU flash kernel takes no dropout: with dropout > 0 torch picks the math (``_fused_sdp_choice`` 0),
    so a training step of ``nn.TransformerEncoderLayer`` (dropout 0.1) runs ``bmm`` and the attention's dropout mask;
    without dropout the flash kernel for CPUs."""
    q = torch.randn(2, 2, 8, 8)
    assert torch._fused_sdp_choice(q, q, q, None, 0.1, False) == 0 and torch._fused_sdp_choice(q, q, q, None, 0.0, False) == 1
    for dropout, flash in ((0.1, False), (0.0, True)):
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=dropout, batch_first=True)
        ops = [r.op for r in trace_step(layer, (torch.randn(2, 8, 32), torch.randn(2, 8, 32)), device_type="cpu").records]
        assert ("_scaled_dot_product_flash_attention_for_cpu" in ops) == flash and ("bmm" in ops) != flash
        assert ops.count("bernoulli_") == (4 if dropout else 0)  # attention weights, its output, the feed-forward's two


def _ran_natively(x: torch.Tensor, conv: nn.Module, threads: int) -> bool:
    """Whether torch ran ``conv(x)`` with THNN's ``_slow_conv2d`` on ``threads`` threads (the profiler's ops)."""
    from torch.profiler import ProfilerActivity, profile

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            conv(x)
    finally:
        torch.set_num_threads(before)
    return any(e.key == "aten::_slow_conv2d_forward" for e in prof.key_averages())


@pytest.mark.parametrize(
    ("batch", "cin", "side", "kernel", "stride", "threads"),
    [
        (8, 16, 6, 1, 1, 1),
        (16, 16, 6, 1, 1, 1),
        (8, 16, 6, 1, 1, 2),
        (8, 16, 6, 1, 2, 1),
        (8, 16, 6, 3, 1, 1),
        (1, 4, 6, 3, 1, 2),
        (1, 32, 32, 3, 1, 2),
    ],
)
def test_a_cpu_convolution_is_traced_as_the_kernel_torch_runs(batch, cin, side, kernel, stride, threads):
    """torch runs an FP32 CPU convolution natively (THNN: a GEMM per sample), not with oneDNN, for a 1×1 unstrided
    kernel on fewer than 16 samples and one thread, or for one small sample (``prenet.cpu_dispatch.native_conv``,
    checked here against what torch ran). The trace records it, forward and backward, as its own family with the
    convolution's FLOPs and the per-sample GEMM view, and the answer says so; a real measured step labels it the same."""
    from prenet.ops.families import NATIVE_CONV
    from prenet.ops.trace import conv_runs_natively, measure_step

    conv, x = nn.Conv2d(cin, 8, kernel, stride=stride, padding=kernel // 2), torch.randn(batch, cin, side, side)
    native = conv_runs_natively(x, conv.weight, conv.stride, conv.dilation, conv.groups, threads)
    assert native == _ran_natively(x, conv, threads)
    trace = trace_step(conv, (x, torch.randn_like(conv(x))), device_type="cpu", threads=threads, input_grad=True)
    convs = [r for r in trace.records if r.op.startswith("convolution")]
    assert [(r.op, r.family) for r in convs] == [
        ("convolution", NATIVE_CONV if native else "conv"),
        ("convolution_backward", NATIVE_CONV if native else "conv"),
    ]
    out = conv(x).shape[-1]
    assert convs[0].flops == 2 * batch * 8 * out * out * cin * kernel * kernel
    if native:  # the per-sample GEMMs' view, each reading the weight (the backward's weight gradient too)
        assert all((r.batch, r.m, r.n, r.k) == (batch, 8, out * out, cin * kernel * kernel) for r in convs)
        # against the same convolution as oneDNN runs it (two threads): the weight read once per sample, forward and
        # backward, and the accumulated weight gradient read and written once per sample
        onednn = [
            r
            for r in trace_step(conv, (x, torch.randn_like(conv(x))), device_type="cpu", threads=2, input_grad=True).records
            if r.op.startswith("convolution")
        ]
        weight = 4 * conv.weight.numel()
        if all(r.family == "conv" for r in onednn):  # (one small sample runs natively on any thread count)
            assert [n.bytes - o.bytes for n, o in zip(convs, onednn)] == [(batch - 1) * weight, (3 * batch - 2) * weight]
        # a frozen weight: no weight gradient, so no re-reads of it in the backward
        conv.weight.requires_grad_(False)
        frozen = [
            r
            for r in trace_step(conv, (x, torch.randn_like(conv(x))), device_type="cpu", threads=threads, input_grad=True).records
            if r.op == "convolution_backward"
        ]
        conv.weight.requires_grad_(True)
        assert len(frozen) == 1 and frozen[0].family == NATIVE_CONV and frozen[0].bytes < convs[1].bytes - batch * weight
    assert any("convolutions run natively" in n for n in trace.notes) == native  # the answer says so
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        measured = measure_step(conv, (x, torch.randn_like(conv(x))), input_grad=True, warmup=False, min_block_ms=0.01, repeats=1)
    finally:
        torch.set_num_threads(before)
    assert [r.family for r in measured.records if r.op.startswith("convolution")] == [c.family for c in convs]


@pytest.mark.parametrize(("batch", "kernel", "length", "native"), [(8, 1, 100, True), (16, 1, 100, False), (8, 3, 100, False), (1, 3, 50, True)])
def test_a_cpu_1d_convolution_follows_the_same_rule_as_the_2d_one_it_runs_as(batch, kernel, length, native):
    """torch runs ``conv1d`` as a 2-D convolution of height 1, so the same rule picks its kernel: a pointwise
    (kernel 1) ``Conv1d`` on 8 samples and one thread runs natively, and is traced as such."""
    from prenet.ops.families import NATIVE_CONV

    conv, x = nn.Conv1d(8, 16, kernel), torch.randn(batch, 8, length)
    assert _ran_natively(x, conv, 1) == native
    trace = trace_step(conv, (x, torch.randn_like(conv(x))), device_type="cpu", threads=1, input_grad=True)
    forward = [r for r in trace.records if r.phase == "forward" and r.op == "convolution"]
    assert [r.family for r in forward] == [NATIVE_CONV if native else "conv"]
    assert forward[0].flops == 2 * batch * 16 * (length - kernel + 1) * 8 * kernel


@pytest.mark.parametrize(
    ("stride", "precision", "input_grad", "device", "brgemm"),
    [
        (2, "bf16", True, "cpu", True),
        (1, "bf16", True, "cpu", False),
        (2, "fp32", True, "cpu", False),
        (2, "bf16", False, "cpu", False),
        (2, "bf16", True, "cuda", False),
    ],
)
def test_a_bf16_strided_depthwise_backward_on_a_cpu_is_traced_as_the_kernel_onednn_runs(stride, precision, input_grad, device, brgemm):
    """oneDNN forms a BF16 depthwise convolution's strided input gradient with a batch-reduce GEMM of one channel per
    group, not its depthwise kernel (``prenet.cpu_dispatch.brgemm_depthwise_backward``): the trace records that backward
    as its own family on a CPU, and only there: stride 1, FP32, a first layer (no input gradient) and a GPU keep the
    depthwise family; the forward always does. A real measured step labels it the same."""
    from prenet.ops.families import DEPTHWISE_BRGEMM
    from prenet.ops.trace import measure_step

    conv, x = nn.Conv2d(16, 16, 3, stride=stride, padding=1, groups=16), torch.randn(4, 16, 12, 12)
    batch = (x, torch.randn_like(conv(x)))
    threads = 1 if device == "cpu" else None
    trace = trace_step(conv, batch, device_type=device, threads=threads, precision=precision, input_grad=input_grad)
    convs = {r.op: r.family for r in trace.records if r.op.startswith("convolution")}
    assert convs["convolution"] == "conv_depthwise"
    assert convs["convolution_backward"] == (DEPTHWISE_BRGEMM if brgemm else "conv_depthwise")
    assert any("brgconv_strided" in n for n in trace.notes) == brgemm  # the answer says why that backward is slow
    if device == "cpu":
        measured = measure_step(conv, batch, precision=precision, input_grad=input_grad, warmup=False, min_block_ms=0.01, repeats=1)
        assert {r.op: r.family for r in measured.records if r.op.startswith("convolution")} == convs


def test_a_transposed_convolution_is_never_traced_as_a_native_one():
    """The native rule is the forward convolution's: a 1×1 ``ConvTranspose2d`` on 8 samples stays a ``conv`` op."""
    conv, x = nn.ConvTranspose2d(16, 8, 1), torch.randn(8, 16, 6, 6)
    trace = trace_step(conv, (x, torch.randn_like(conv(x))), device_type="cpu", threads=1, input_grad=True)
    assert {r.family for r in trace.records if r.op.startswith("convolution")} == {"conv"}


def test_a_random_draw_is_timed_by_its_generators_arithmetic():
    """A dropout mask's ``bernoulli_`` costs its generator's arithmetic per element: on a CPU its roofline is
    compute-bound and grows with the elements (the trees then extrapolate past the measured sizes); on a GPU it stays
    memory-bound; other elementwise ops keep their counted FLOPs."""
    from prenet.hardware.catalog import get
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.efficiency import RANDOM_DRAW_FLOPS_PER_ELEMENT, roofline_ms

    n = np.array([1e5, 1e6])
    frame = pl.DataFrame({"op": ["bernoulli_", "bernoulli_"], "flops": n, "bytes": 8 * n, "unit": ["fp32", "fp32"], "family": ["elementwise"] * 2})
    cpu = HardwareSpec("cpu-test", "cpu", peak_fp32_tflops=0.1, mem_bw_gbps=20.0, cores=1, clock_mhz=2600, cache_bw_gbps=95.0)
    compute, memory = roofline_ms(frame, cpu)
    assert compute == pytest.approx(RANDOM_DRAW_FLOPS_PER_ELEMENT * n / (cpu.peak_fp32_tflops * 1e12) * 1e3)
    assert (compute > memory).all() and compute[1] == pytest.approx(10 * compute[0])
    g_compute, g_memory = roofline_ms(frame, get("A100 80GB SXM4"))
    assert (g_memory > g_compute).all()
    add = frame.with_columns(pl.lit("add").alias("op"))
    assert roofline_ms(add, cpu)[0] == pytest.approx(n / (cpu.peak_fp32_tflops * 1e12) * 1e3)


def test_a_lookup_reads_the_rows_its_indices_pick_not_the_whole_table():
    """An embedding of a 30,522-word table reads one row per token, and ``nll_loss`` one log-probability per target:
    counted whole, the table made a lookup of 32 tokens a 94 MB read."""

    class Lookup(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.head = nn.Embedding(30522, 768), nn.Linear(768, 10)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(tokens).mean(1))

    tokens = torch.randint(0, 30522, (4, 8))
    recs = {r.op: r for r in trace_step(Lookup(), (tokens, torch.randint(0, 10, (4,))), device_type="meta").records}
    assert recs["embedding"].bytes == tokens.numel() * 8 + 32 * 768 * 4 + 4 * 8 * 768 * 4  # indices, rows, output
    assert recs["nll_loss_forward"].bytes < 4 * 10 * 4  # 4 entries of the 4 × 10 log-probabilities (and targets)
    assert recs["embedding_dense_backward"].bytes > 30522 * 768 * 4  # the gradient of the whole table is written


def test_a_cpu_roofline_runs_at_its_l2_bandwidth_where_it_is_measured():
    """A CPU's memory roofline takes its fastest measured cache: the L2's where the detection read it (an Intel Xeon
    whose L3 is a slow mesh), else the last-level cache's, else DRAM's."""
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.efficiency import roofline_bandwidth_gbps

    cpu = HardwareSpec("cpu-test", "cpu", peak_fp32_tflops=0.1, mem_bw_gbps=15.0, cores=1, clock_mhz=2600, cache_bw_gbps=30.0)
    assert roofline_bandwidth_gbps(cpu) == 30.0
    assert roofline_bandwidth_gbps(replace(cpu, l2_bw_gbps=140.0)) == 140.0
    assert roofline_bandwidth_gbps(replace(cpu, cache_bw_gbps=None)) == 15.0
    assert roofline_bandwidth_gbps(get("A100 80GB SXM4")) == get("A100 80GB SXM4").mem_bw_gbps


def test_a_training_batch_norm_moves_its_tensors_as_often_as_its_kernels_pass_over_them():
    """Batch norm reads its input once for the statistics and again to normalise (3 tensors for the 2 traced), and its
    backward reduces dy·x before it writes dx (5 for 3): its memory roofline is that much longer than an elementwise op
    moving the same traced bytes."""
    from prenet.hardware.catalog import get
    from prenet.steptime.efficiency import roofline_ms

    ops = ["native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm", "add"]
    frame = pl.DataFrame({"op": ops, "flops": [1e6] * 4, "bytes": [3e8] * 4, "unit": ["fp32"] * 4, "family": ["norm"] * 3 + ["elementwise"]})
    memory = roofline_ms(frame, get("V100 SXM2"))[1]
    assert memory / memory[3] == pytest.approx([1.5, 5 / 3, 1.5, 1.0])


def test_fused_kernels_as_the_device_runs_them():
    """On meta, attention and an LSTM would decompose into their math; the trace uses the kernels a real device picks
    (CPU: flash attention for CPUs and oneDNN's fused LSTM layer, as torch.autocast-free real runs show)."""
    bert, batch = _meta("bert_base_like")
    ops = {r.op for r in trace_step(bert, batch, device_type="cpu").records}
    assert "_scaled_dot_product_flash_attention_for_cpu" in ops and "bmm" not in ops  # nn.MultiheadAttention's internal call too
    ops16 = {(r.op, r.dtype) for r in trace_step(bert, batch, device_type="cuda", precision="fp16").records if r.family in ("gemm", "attention")}
    assert all(d == "float16" for _, d in ops16)
    lstm, batch = _meta("lstm_lm")
    cpu = trace_step(lstm, batch, device_type="cpu").records
    assert [r.op for r in cpu if r.family == "rnn" and r.op.startswith("mkldnn")] == ["mkldnn_rnn_layer"] * 2 + ["mkldnn_rnn_layer_backward"] * 2
    real = torch.nn.LSTM(8, 4, num_layers=2, batch_first=True)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Names.seen.append(base_name(func))
            return func(*args, **(kwargs or {}))

    with Names():
        real(torch.randn(2, 5, 8))[0].sum().backward()
    assert Names.seen.count("mkldnn_rnn_layer") == 2  # what the emulation assumes a CPU does


class _GruNet(nn.Module):
    """Two bidirectional GRU layers, batch first, and a head: the shapes a CPU's GRU loop must reproduce."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(6, 5, num_layers=2, batch_first=True, bidirectional=True, dropout=0.0)
        self.out = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.gru(x)[0]).flatten(0, 1)


def test_a_cpu_gru_is_traced_as_the_cpu_runs_it():
    """On meta a GRU projects each timestep's input on its own; a CPU projects the whole sequence once per layer and
    direction (ATen's FullLayer pre_compute_input) and runs one hidden projection per step. The trace's forward and
    backward ops (names, shapes) are the CPU's: the same multiset as a real step's, in-place or not aside (autograd
    accumulates gradients with add on meta, add_ on a CPU)."""
    torch.manual_seed(0)
    batch = (torch.randn(3, 7, 6), torch.randint(0, 3, (21,)))

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shapes = ", ".join("x".join(map(str, a.shape)) for a in args if isinstance(a, torch.Tensor))
            self.ops.append((base_name(func), shapes))
            return out

    from prenet.ops import training_loss

    real = _GruNet()
    with Seen() as seen:
        training_loss(real(batch[0]), batch[1]).backward()
    with torch.device("meta"):
        meta = _GruNet()
    traced = trace_step(meta, tuple(t.to("meta") for t in batch), device_type="cpu").records
    keep = {"mm", "addmm", "sigmoid_", "tanh_", "sigmoid_backward", "tanh_backward", "sub", "mul_"}

    def counts(ops):
        out: dict = {}
        for op, shapes in ops:
            if op in keep:
                out[(op, shapes)] = out.get((op, shapes), 0) + 1
        return out

    want = counts(seen.ops)
    assert want[("addmm", "15, 3x5, 5x15")] == 2 * 2 * 7  # one hidden projection per layer, direction and step
    assert counts((r.op, r.shapes) for r in traced if r.phase != "optimizer") == want


def test_a_batch_norm_carries_its_spatial_run_and_channels():
    """A batch norm's record names what sets a CPU kernel's speed: the spatial size each channel's runs have (m) and
    the channels (n), N as its batch, no k; the efficiency features tile it as the row-wise op it is, not as a GEMM."""
    from prenet.steptime.efficiency import FEATURES, feature_matrix

    with torch.device("meta"):
        net = nn.Sequential(nn.BatchNorm2d(48), nn.Flatten(), nn.Linear(48 * 4, 3))
    trace = trace_step(net, (torch.randn(16, 48, 2, 2), torch.randint(0, 3, (16,))), device_type="cpu")
    bn = [r for r in trace.records if "batch_norm" in r.op]
    assert {r.phase for r in bn} == {"forward", "backward"}
    assert all((r.batch, r.m, r.n, r.k) == (16, 4, 48, 0) for r in bn)
    x, _ = feature_matrix(trace.frame().filter(pl.col("op").str.contains("batch_norm")), get("V100 SXM2"))
    tiles = x[:, FEATURES.index("log2_tiles")]
    assert np.allclose(tiles, np.log2(np.ceil(16 * 48 * 4 / 128**2) + 1))  # by elements, as elementwise ops (log2 1 + x)


def test_an_op_that_overwrites_its_destination_moves_only_what_it_reads_and_writes():
    """copy_ reads its source and writes its destination; zero_ and fill_ only write; add_ reads both and writes one."""
    from prenet.ops.trace import trace_call

    a, b = torch.empty(1000, device="meta"), torch.empty(1000, device="meta")
    moved = {
        r.op: r.bytes
        for fn, args in ((torch.Tensor.copy_, (a, b)), (torch.Tensor.zero_, (a,)), (torch.Tensor.add_, (a, b)))
        for r in trace_call(fn, *args)
    }
    assert moved == {"copy_": 8000, "zero_": 4000, "add_": 12000}
    assert [r.bytes for r in trace_call(lambda x: x.fill_(1.0), a)] == [4000]


def test_roofline_knows_winograd_alignment_and_per_element_work():
    from prenet.ops.families import op_class, winograd_3x3
    from prenet.steptime.efficiency import algorithmic_gain, alignment

    assert winograd_3x3("convolution", "16x64x32x32, 128x64x3x3", "16x128x32x32", 1)
    assert winograd_3x3("convolution_backward", "16x128x32x32, 16x64x32x32, 128x64x3x3", "16x64x32x32, 128x64x3x3", 1)
    assert not winograd_3x3("convolution", "16x64x32x32, 128x64x3x3", "16x128x16x16", 1)  # stride 2
    assert not winograd_3x3("convolution", "16x64x32x32, 128x64x1x1", "16x128x32x32", 1)  # 1×1
    assert not winograd_3x3("convolution", "16x64x32x32, 64x1x3x3", "16x64x32x32", 64)  # depthwise
    assert list(alignment(np.array([768, 3072, 2220, 425, 16, 0]))) == [6, 6, 2, 0, 4, 0]
    # a GEMM operand's row stride in bytes, up to 16 KB: 1024 BF16 elements (2 KB) apart from 1000 (2000 B) and 768
    from prenet.steptime.efficiency import stride_pow2

    got = stride_pow2(np.array([1024, 1000, 768, 2048, 8192, 1024]), np.array([2, 2, 2, 4, 4, 2]), np.array([True] * 5 + [False]))
    assert list(got) == [11, 4, 9, 13, 14, 0]
    # ... set on every CPU GEMM (ATen's reference loops, MKL, oneDNN: the CPU's own trees learn what it costs there), not
    # on a GPU
    from dataclasses import replace

    from prenet.hardware.local import detect_cpu
    from prenet.steptime.efficiency import FEATURES, feature_matrix

    cols = [FEATURES.index("stride_pow2_a"), FEATURES.index("stride_pow2_b")]
    cpu = detect_cpu(1)
    for precision, extra, device, expect in (
        ("bf16", {"bf16_units": "none", "simd_bits": 256}, "cpu", True),
        ("fp32", {"bf16_units": "none", "simd_bits": 256}, "cpu", True),  # MKL's FP32 GEMMs alias too (d = 1024)
        ("bf16", {"bf16_units": "amx_bf16", "simd_bits": 512}, "cpu", True),
        ("fp32", {}, "cpu", True),  # a spec sheet that does not say (a user's YAML)
        ("fp32", None, "cuda", False),
        ("bf16", None, "cuda", False),
    ):
        f = trace_step(*_meta("mlp", 16), precision=precision, device_type=device).frame().filter(pl.col("family") == "gemm")
        hw = replace(cpu, extra=extra) if device == "cpu" else get("A100 80GB SXM4")
        assert (feature_matrix(f, hw)[0][:, cols] > 0).any() == expect, (precision, extra, device)
    # a CPU GEMM's phase is hidden from the trees (one ATen mm, forward or backward: its layout and strides are
    # features); a GPU's keeps it
    f = trace_step(*_meta("mlp", 16), device_type="cpu").frame().filter(pl.col("family") == "gemm")
    ph = FEATURES.index("phase_code")
    assert set(f.get_column("phase")) >= {"forward", "backward"}
    assert not feature_matrix(f, cpu)[0][:, ph].any() and feature_matrix(f, get("A100 80GB SXM4"))[0][:, ph].any()
    # each operand's own stride: a Linear's input gradient (both row-major: A k apart, B n apart) and its weight gradient
    # (A transposed: m apart) on a 16 x 1024 -> 512 layer in BF16
    net = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 512))
    f = trace_step(net, torch.randn(16, 1024), precision="bf16", device_type="cpu").frame().filter(pl.col("op") == "mm")
    x = feature_matrix(f, replace(cpu, extra={"bf16_units": "none", "simd_bits": 256}))[0][:, cols]
    got = {(r["m"], r["n"], r["k"], r["layout"]): tuple(v) for r, v in zip(f.iter_rows(named=True), x.tolist())}
    assert got[(16, 1024, 512, 0)] == (10.0, 11.0)  # grad (16 x 512) @ W (512 x 1024): rows of 512 and 1024 BF16 values
    assert got[(512, 1024, 16, 1)] == (10.0, 11.0)  # grad^T (512 x 16, stored 16 x 512) @ x (16 x 1024)
    assert op_class("add") < op_class("div") < op_class("gelu") < op_class("bernoulli_")
    # the gain applies on GPUs only, and a Winograd convolution's GPU roofline is 2.25× lower than its direct FLOPs'
    trace = trace_step(*_meta("resnet18", 2), device_type="cuda")
    frame = trace.frame().filter(pl.col("family") == "conv")
    gain = algorithmic_gain(frame, get("A100 80GB SXM4"))
    assert set(np.unique(gain)) == {1.0, 2.25}
    # ... on CUDA cores only: tensor-core convolutions (FP16 here) run implicit-GEMM kernels, at most at the tensor peak
    half = trace_step(*_meta("resnet18", 2), precision="fp16", device_type="cuda").frame().filter(pl.col("family") == "conv")
    assert set(half.get_column("unit")) == {"fp16"} and (algorithmic_gain(half, get("A100 80GB SXM4")) == 1.0).all()
    from prenet.hardware.local import detect_cpu

    assert (algorithmic_gain(frame, detect_cpu(1)) == 1.0).all()


def test_a_strided_convolutions_backward_is_told_apart_by_what_it_writes():
    """The ``log2_write_ratio`` feature: 0 for every op but a convolution's backward, stride² for a depthwise
    convolution's backward (the input gradient it scatters back), so stride 1 and 2 are two features apart."""
    from prenet.measurement.ops import build_config
    from prenet.steptime.efficiency import FEATURES, feature_matrix

    a100 = get("A100 80GB SXM4")

    def with_ratio(module: nn.Module, batch) -> pl.DataFrame:
        f = trace_step(module, batch).frame()
        return f.with_columns(pl.Series("wr", feature_matrix(f, a100)[0][:, FEATURES.index("log2_write_ratio")]))

    for stride in (1, 2):
        m, x = build_config("depthwise_block", {"batch": 2, "channels": 4, "input_size": 16, "kernel_size": 3, "stride": stride, "expand": 4})
        f = with_ratio(m.to("meta"), x.to("meta"))
        dw = f.filter(pl.col("family") == "conv_depthwise")
        assert dw.filter(pl.col("phase") == "forward")["wr"].to_list() == [0.0]
        assert dw.filter(pl.col("phase") == "backward")["wr"][0] == pytest.approx(2.0 * np.log2(stride), abs=0.1)
        assert (f.filter(~pl.col("family").str.starts_with("conv"))["wr"] == 0).all()
    vit = with_ratio(*_meta("vit_tiny", 2))
    assert vit.filter(pl.col("family") == "attention").height and (vit.filter(pl.col("family") == "attention")["wr"] == 0).all()


def test_more_blocks_are_drawn_apart_from_the_others():
    """``sample_blocks``: each block kind from its own generator, so asking for more depthwise blocks neither repeats
    the benchmark's own depthwise configurations nor moves any other's."""
    from prenet.measurement.ops import sample_blocks, sample_configs

    dw = sample_blocks({"depthwise_block": 5}, seed=7)
    assert len(dw) == 5 and {k for k, _ in dw} == {"depthwise_block"} and len({json.dumps(c, sort_keys=True) for _, c in dw}) == 5
    assert sample_blocks({"depthwise_block": 8, "conv1d_block": 2}, seed=7)[2:7] == dw  # sorted by kind: conv1d first
    own = [c for k, c in sample_configs({}, per_kind=5, seed=7) if k == "depthwise_block"]
    assert not any(c in own for _, c in dw)


def test_a_named_block_space_draws_within_its_own_ranges():
    """``bf16_native_blocks`` entries may name a kind and narrow its space (the stride-2 depthwise corner); the other
    entries are unmoved, and a space the kind cannot take is refused in one line."""
    from prenet.errors import PrenetError
    from prenet.measurement.ops import sample_blocks

    spec = {"kind": "depthwise_block", "configs": 12, "space": {"batch": [4, 32], "input_size": [8, 40], "stride": [2], "expand": [6]}}
    s2 = sample_blocks({"depthwise_s2": spec}, seed=7)
    assert len(s2) == 12 and {k for k, _ in s2} == {"depthwise_block"}
    assert all(c["stride"] == 2 and c["expand"] == 6 and 4 <= c["batch"] <= 32 and 8 <= c["input_size"] <= 40 for _, c in s2)
    assert len({c["batch"] for _, c in s2}) > 3  # drawn, not pinned
    assert sample_blocks({"depthwise_s2": spec, "depthwise_block": 5}, seed=7)[:5] == sample_blocks({"depthwise_block": 5}, seed=7)
    for bad in (
        {"kind": "conv1d_block", "configs": 2, "space": {"batch": [1, 2]}},
        {"kind": "depthwise_block", "configs": 2, "space": {"width": [1, 2]}},
        {"kind": "depthwise_block", "configs": 2, "space": {"stride": 2}},  # a number, not a list: would draw 0 or 1
        {"kind": "depthwise_block", "configs": 2, "space": {"batch": [4]}},
        {"kind": "depthwise_block", "configs": 2, "space": {"batch": [8, 4]}},
        {"kind": "nope", "configs": 1},
    ):
        with pytest.raises(PrenetError) as e:
            sample_blocks({"x": bad}, seed=7)
        assert "\n" not in str(e.value) and "bf16_native_blocks.x" in str(e.value)
    with pytest.raises(PrenetError, match=r"ops\.benchmark\.fp32_blocks\.x"):  # the FP32 blocks' errors name their own key
        sample_blocks({"x": {"kind": "nope", "configs": 1}}, seed=7, where="ops.benchmark.fp32_blocks")


def test_the_op_benchmark_times_its_fp32_blocks_in_fp32(tiny_pipeline):
    """ops.benchmark.fp32_blocks: more depthwise blocks in FP32 (the family had 24 training rows from
    configs_per_kind alone); the tiny run's one extra block is timed beside configs_per_kind's one."""
    from pipeline.artifacts import read_artifact

    _, cfg, _ = tiny_pipeline("benchmark_ops")
    ops = read_artifact(cfg, "op_timings")
    dw = ops.filter((pl.col("family") == "conv_depthwise") & (pl.col("precision") == "fp32"))
    assert dw.get_column("config_id").n_unique() >= 2
    # ... and ops.benchmark.fp32_wide's power-of-two linear layer and 3x3 convolution, in FP32 only
    from prenet.measurement.ops import config_id, sample_wide

    sampled = dict(
        sample_wide(dict(cfg.ops.benchmark.fp32_wide), seed=int(cfg.ops.benchmark.seed), aligned_share=float(cfg.ops.benchmark.aligned_share))
    )
    assert set(sampled) == {"linear", "conv2d"}
    for kind, c in sampled.items():
        mine = ops.filter(pl.col("config_id") == config_id(kind, c))
        assert mine.height and set(mine.get_column("precision")) == {"fp32"}
    assert all(sampled["linear"][k] in (64, 128) for k in ("in_features", "out_features"))
    assert all(sampled["conv2d"][k] in (8, 16) for k in ("in_channels", "out_channels")) and sampled["conv2d"]["kernel_size"] == 3


def test_wide_op_benchmark_samples_aligned_sizes_within_its_caps():
    from prenet.layers import REGISTRY
    from prenet.measurement.ops import sample_wide, snap_aligned

    rng = np.random.default_rng(0)
    assert snap_aligned({"in_features": 2220, "out_features": 70, "batch": 3}, rng, 1.0) == {"in_features": 2240, "out_features": 64, "batch": 3}
    wide = {"linear": {"configs": 40, "space": {"batch": [1, 4096], "in_features": [8, 4096], "out_features": [8, 4096], "max_flops": 6e9}}}
    cfgs = sample_wide(wide, seed=7, aligned_share=0.6)
    assert len(cfgs) == 40 and {k for k, _ in cfgs} == {"linear"}
    sizes = [c[k] for _, c in cfgs for k in ("in_features", "out_features") if c[k] >= 128]
    assert 0.3 < np.mean([s % 64 == 0 for s in sizes]) < 0.95  # a share aligned, not all
    assert max(REGISTRY["linear"].cost(c, 4).forward_flops for _, c in cfgs) <= 6e9 * 1.2  # the cap holds (after rounding)
    # a second space of the same kind, named with its kind (the skinny GEMMs of large weights)
    skinny = {"configs": 10, "space": {"batch": [1, 64], "in_features": [256, 4096], "out_features": [256, 4096], "max_flops": 2e9}}
    both = sample_wide(wide | {"linear_skinny": {"kind": "linear", **skinny}}, seed=7, aligned_share=0.6)
    assert both[:40] == cfgs and {k for k, _ in both} == {"linear"}
    assert all(c["batch"] <= 64 and min(c["in_features"], c["out_features"]) >= 256 for _, c in both[40:])

    # a space added before others (by name) leaves their configurations as they were
    def convs(configs: int, **space) -> dict:
        return {"conv2d": {"configs": configs, "space": {"batch": [1, 8], "kernel_size": [1], "input_size": [2, 8], "stride": [1], **space}}}

    first = sample_wide(convs(3, in_channels=[3, 16], out_channels=[16, 32]) | wide, seed=7, aligned_share=0.6)
    assert first[3:] == cfgs
    # a CNN's power-of-two channels, where asked
    pow2 = sample_wide(convs(8, in_channels=[200, 2048], out_channels=[200, 2048], powers_of_two=True), seed=7, aligned_share=0.0)
    assert all(c[k] in (256, 512, 1024, 2048) for _, c in pow2 for k in ("in_channels", "out_channels"))
    # ... and a linear layer's power-of-two widths, within the space's cap
    dense = {
        "linear_pow2": {
            "kind": "linear",
            "configs": 8,
            "space": {"batch": [1, 64], "in_features": [200, 2048], "out_features": [200, 2048], "powers_of_two": True, "max_flops": 6e7},
        }
    }
    lin = sample_wide(dense, seed=7, aligned_share=0.0)
    assert all(c[k] in (256, 512, 1024, 2048) for _, c in lin for k in ("in_features", "out_features"))
    assert max(REGISTRY["linear"].cost(c, 4).forward_flops for _, c in lin) <= 6e7
    # bounds that hold no power of two: one error naming the space (a config error: one line, exit 2 in a stage)
    from prenet.errors import ConfigError

    bad = {"linear_pow2": {**dense["linear_pow2"], "space": {**dense["linear_pow2"]["space"], "in_features": [600, 1000]}}}
    with pytest.raises(ConfigError, match="'linear_pow2'.*no power of two within \\[600, 1000\\]"):
        sample_wide(bad, seed=7, aligned_share=0.0)


def test_justus_peaks_follow_cores_times_clock():
    for name, tflops in (("Tesla M60 (half board)", 4.825), ("Tesla K80 (half board)", 4.368), ("GTX 1080 Ti", 11.34)):
        assert get(name).peak_fp32_tflops == pytest.approx(tflops, rel=1e-3)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop"])
@pytest.mark.parametrize("device_type,precision", [("cpu", "fp32"), ("cpu", "bf16"), ("cuda", "fp32"), ("cuda", "fp16")])
def test_the_meta_optimizer_step_traces_the_same_ops_as_torch_optim(optimizer, device_type, precision):
    """The functional optimizer step of a meta trace (no torch.optim.Optimizer, so no torch._dynamo import) records
    exactly the ops of torch.optim's step in its steady state (momentum buffers primed; Adam's lazy state), foreach
    kernels on cuda, AdamW's decoupled decay, order."""
    from dataclasses import asdict

    from prenet import zoo
    from prenet.ops import trace_step

    for build in (
        lambda: zoo.gpt_sdpa(batch_size=2, vocab=64, d=32, layers=1, heads=2, seq_len=8),
        lambda: zoo.resnet18(batch_size=2, image_size=16),
    ):
        with torch.device("meta"):
            module, batch = build()
        kw = {"optimizer": optimizer, "precision": precision, "device_type": device_type}
        fast, ref = trace_step(module, batch, **kw), trace_step(module, batch, via_torch_optim=True, **kw)
        # the same ops reading the same operands; their reuse distances differ by the few bytes torch.optim's own
        # state (step counters) touches
        assert [{**asdict(r), "reads": [b for b, _ in r.reads]} for r in fast.records] == [
            {**asdict(r), "reads": [b for b, _ in r.reads]} for r in ref.records
        ]
        assert any(r.phase == "optimizer" for r in fast.records)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_a_fused_optimizer_step_traces_the_one_kernel_torch_runs(optimizer):
    """``fused=True``: the meta trace's optimizer phase has the ops, bytes and FLOPs of torch.optim's fused step run
    for real on this CPU (``_fused_sgd_``, which has no meta kernel, included), and it moves fewer bytes than foreach."""
    from prenet.ops import measure_step, trace_step

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))

    def opt_phase(trace):
        return [(r.op, r.bytes, r.flops) for r in trace.records if r.phase == "optimizer"]

    fused = trace_step(module, batch, optimizer=optimizer, fused=True, device_type="cuda")
    real = measure_step(module, batch, optimizer=optimizer, fused=True, repeats=1, min_block_ms=0.01)
    assert fused.fused and opt_phase(fused) == opt_phase(real)
    assert any(op.startswith("_fused_") for op, _, _ in opt_phase(fused))
    foreach = trace_step(module, batch, optimizer=optimizer, device_type="cuda")
    if optimizer != "sgd":  # plain SGD is one pass either way
        assert sum(b for _, b, _ in opt_phase(fused)) < sum(b for _, b, _ in opt_phase(foreach))


def test_nchw_fp16_convolutions_carry_cudnns_layout_transposes_and_channels_last_does_not():
    """On CUDA, tensor-core (FP16/BF16/TF32) convolutions of NCHW tensors get cuDNN's nchwToNhwc / nhwcToNchw copies
    (forward and both backward passes); ``channels_last`` runs NHWC end to end (none), plain FP32 runs cuDNN's NCHW SIMT
    kernels (none), as does every CPU trace; the caller's module keeps its layout."""
    from prenet import zoo
    from prenet.ops import trace_step

    with torch.device("meta"):
        module, batch = zoo.resnet18(batch_size=2, image_size=32)

    def transposes(**kw):
        return [r for r in trace_step(module, batch, optimizer="sgd", **kw).records if r.op in ("nchwToNhwc", "nhwcToNchw")]

    convs = [r for r in trace_step(module, batch, optimizer="sgd", precision="fp16", device_type="cuda").records if r.op == "convolution"]
    nchw = transposes(precision="fp16", device_type="cuda")
    # one in and one out per call: each forward convolution and its backward call (two kernels, one set of transposes)
    assert len(nchw) == 2 * 2 * len(convs) and {r.family for r in nchw} == {"copy"} and {r.phase for r in nchw} == {"forward", "backward"}
    assert all(r.bytes > 0 and r.dtype == "float16" for r in nchw)
    assert transposes(precision="fp16", device_type="cuda", memory_format="channels_last") == []
    assert transposes(precision="bf16", device_type="cuda")
    # an fp32 trace records them as a GPU with TF32 units runs them; one without runs none (test below)
    assert len(transposes(precision="fp32", device_type="cuda")) == len(nchw)
    tf32 = transposes(precision="tf32", device_type="cuda")
    assert len(tf32) == len(nchw) and {r.dtype for r in tf32} == {"float32"}
    assert sum(r.bytes for r in tf32) == 2 * sum(r.bytes for r in nchw)  # the same tensors in 4 bytes, not 2
    assert transposes(precision="tf32", device_type="cuda", memory_format="channels_last") == []
    assert not transposes(precision="bf16", device_type="cpu")
    assert next(module.parameters()).is_contiguous()  # NCHW still


def test_fp32_on_a_gpu_runs_as_torchs_defaults_cudnn_on_tf32_where_the_gpu_has_it():
    """torch's defaults (cudnn.allow_tf32 True, cuda.matmul.allow_tf32 False): an fp32 step on a GPU with TF32 units runs
    its convolutions on them between cuDNN's layout transposes, its GEMMs in IEEE FP32; on one without, every op on the
    FP32 units and no transposes. The answer says which."""
    import torch

    from prenet import zoo
    from prenet.hardware.catalog import get
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import predict_trace

    assert torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32  # the defaults modelled
    module, batch = build_on_meta(zoo.resnet18, batch_size=2, image_size=32)
    fp32, tf32 = (trace_step(module, batch, optimizer="sgd", precision=p, device_type="cuda") for p in ("fp32", "tf32"))
    on, off = fp32.frame_for(True), fp32.frame_for(False)
    is_t = pl.col("op").is_in(["nchwToNhwc", "nhwcToNchw"])
    assert off.filter(is_t).height == 0 and set(off["unit"]) == {"fp32"}
    assert on.filter(is_t).height == tf32.frame().filter(is_t).height > 0
    convs = pl.col("family").is_in(["conv", "conv_grouped"])
    assert set(on.filter(convs)["unit"]) == {"tf32"} and set(on.filter(pl.col("family") == "gemm")["unit"]) == {"fp32"}
    assert set(tf32.frame().filter(pl.col("family") == "gemm")["unit"]) == {"tf32"}
    assert tf32.frame_for(False).equals(tf32.frame())  # only fp32 depends on the GPU
    model = EfficiencyModel(median_efficiency={"gpu": 0.5})
    a100, v100 = (predict_trace(fp32, get(h), model)[0] for h in ("A100 80GB SXM4", "V100 SXM2"))
    a100_tf32 = predict_trace(tf32, get("A100 80GB SXM4"), model)[0]
    assert a100.family_ms["conv"] == pytest.approx(a100_tf32.family_ms["conv"]) and a100.ops == on.height > v100.ops
    assert any("TF32 tensor cores" in n and "allow_tf32" in n for n in a100.notes)
    assert not any("allow_tf32" in n for n in v100.notes) and v100.ops == off.height


def test_channels_last_saves_the_transposes_in_the_answer_and_unknown_formats_list_the_choices():
    from prenet import zoo
    from prenet.errors import PrenetError
    from prenet.hardware.catalog import get
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import predict_step

    module, batch = build_on_meta(zoo.resnet18, batch_size=8, image_size=64)
    model = EfficiencyModel(median_efficiency={"gpu": 0.5})
    kw = {"hardware": get("A100 80GB SXM4"), "model": model, "precision": "fp16", "overhead_ms": 0.0}
    nchw, nhwc = predict_step(module, batch, **kw), predict_step(module, batch, memory_format="channels_last", **kw)
    assert nhwc.step_seconds < nchw.step_seconds and nhwc.memory_format == "channels_last"
    assert nchw.family_ms["copy"] > nhwc.family_ms.get("copy", 0.0)
    with pytest.raises(PrenetError, match="contiguous, channels_last"):
        trace_step(module, batch, memory_format="nhwc")


def test_leave_one_gpu_out_in_worker_processes_gives_the_same_folds():
    """The folds fitted in two spawned processes equal the serial ones, row for row (the stage runs them in parallel)."""
    from prenet.data.external_ops import load_gpu_ops
    from prenet.steptime.op_evaluation import leave_one_gpu_out

    gpu = load_gpu_ops(40).with_columns(pl.lit("fp32").alias("precision"))
    gpu = gpu.filter(pl.col("hardware_id").is_in(sorted(gpu["hardware_id"].unique().to_list())[:3]))
    params = {"n_estimators": 10, "max_depth": 3}
    serial = leave_one_gpu_out(gpu, params=params, workers=1)
    assert serial["hardware_id"].n_unique() == 3 and (serial["mape"] > 0).all()
    assert serial.equals(leave_one_gpu_out(gpu, params=params, workers=2))


def test_neusight_test_ops_are_on_gpus_the_training_set_lacks_and_are_scored_per_gpu_and_kind():
    """NeuSight's op-level test set: no FP32 GEMM or row-wise training op on its GPUs (the L4 has no training op at all,
    the H100 its BF16/TF32 matmul kernels, the A100 80GB PCIe its convolutions); a linear layer is the addmm of its
    dense view (B·M rows), as in the training files; the summary splits addmm and bmm."""
    from prenet.data.external_kernels import load_kernel_ops
    from prenet.data.external_ops import load_gpu_ops, load_unseen_gpu_ops
    from prenet.steptime.op_evaluation import neusight_unseen_ops, unseen_ops_summary

    test = load_unseen_gpu_ops()
    train = load_gpu_ops(40)
    assert sorted(test["hardware_id"].unique()) == ["A100 80GB PCIe", "H100 SXM5 80GB", "L4"]
    assert train.filter(pl.col("hardware_id").is_in(["L4", "H100 SXM5 80GB"])).is_empty()
    assert set(train.filter(pl.col("hardware_id") == "A100 80GB PCIe")["family"]) == {"conv"}
    kernels = load_kernel_ops()
    assert kernels.filter(pl.col("hardware_id").is_in(["L4", "A100 80GB PCIe"])).is_empty()
    assert set(kernels.filter(pl.col("hardware_id") == "H100 SXM5 80GB")["unit"]) == {"tf32", "bf16"}
    lin = test.filter((pl.col("hardware_id") == "L4") & (pl.col("config_id") == "linear,1024,1024,1024")).row(0, named=True)
    assert lin["op"] == "addmm" and lin["flops"] == 2 * 1024**3 and lin["measured_ms"] == pytest.approx(0.3089, rel=1e-3)
    rows = test.filter(pl.col("hardware_id").is_in(["L4", "H100 SXM5 80GB"])).group_by("hardware_id", "op").head(3)
    scored = neusight_unseen_ops(EfficiencyModel(median_efficiency={"gpu": 0.5}), rows)  # no trees: roofline ÷ 0.5
    np.testing.assert_allclose(scored["predicted_ms"], scored["roofline_ms"] / 0.5)
    summary = unseen_ops_summary(scored)
    assert summary["gpus"] == ["H100 SXM5 80GB", "L4"] and {"L4/addmm", "L4/bmm", "L4/norm", "H100 SXM5 80GB/addmm"} <= set(summary["per_gpu_family"])
    l4 = scored.filter(pl.col("hardware_id") == "L4")
    assert summary["per_gpu"]["L4"]["rows"] == l4.height
    ratio = np.median(l4["measured_ms"].to_numpy() / l4["predicted_ms"].to_numpy())
    assert summary["per_gpu"]["L4"]["median_measured_over_predicted"] == pytest.approx(ratio, abs=1e-3)


@pytest.mark.parametrize("optimizer, lists", [("adam", 4), ("sgd", 2), ("momentum", 3)])
def test_a_fused_optimizer_writes_its_gradients_back_only_under_a_grad_scaler(optimizer, lists):
    """The fused kernels read the parameters, gradients and state, and store the parameters and state; the gradients
    are stored only when they unscale them (fp16 with a GradScaler passes ``grad_scale``)."""
    from prenet.ops import trace_step

    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))
    size = sum(p.numel() * 4 for p in module.parameters())

    def fused_bytes(precision):
        trace = trace_step(module, batch, optimizer=optimizer, fused=True, device_type="cuda", precision=precision)
        return sum(r.bytes for r in trace.records if r.op.startswith("_fused_"))

    fp32 = fused_bytes("fp32")
    assert 0 <= fp32 - (2 * lists - 1) * size <= 16  # read every list, write all but the gradients (+ Adam's step counts)
    assert 0 <= fused_bytes("fp16") - fp32 - size <= 8  # the unscaled gradients written back (+ the scale and inf flag)


def test_cuda_traces_run_a_convolutions_backward_as_cudnns_two_kernels_and_cpu_traces_as_one_op():
    """cuDNN's backward-data and backward-filter are separate kernels (DeepBench times them apart): a CUDA trace records
    each, with the forward's multiply-adds and only what it reads (the input gradient: output gradient and weight; the
    weight gradient: output gradient and input); oneDNN's one CPU call stays one op of both."""
    from prenet.ops import trace_step

    with torch.device("meta"):
        module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.Flatten(), nn.Linear(16 * 64, 4))
    batch = (torch.empty(4, 8, 8, 8, device="meta"), torch.zeros(4, dtype=torch.long, device="meta"))

    def convs(device_type: str, phase: str) -> list:
        return [r for r in trace_step(module, batch, optimizer="sgd", device_type=device_type).records if r.family == "conv" and r.phase == phase]

    fwd, cpu, cuda = convs("cuda", "forward"), convs("cpu", "backward"), convs("cuda", "backward")
    assert len(cpu) == 2 and len(cuda) == 3  # the first convolution forms no input gradient: one kernel
    assert sum(r.flops for r in cuda) == sum(r.flops for r in cpu)
    second = fwd[1]
    data, weight = [r for r in cuda if r.module == second.module]
    assert data.flops == weight.flops == second.flops
    grad_out = x = 4 * 16 * 8 * 8 * 4  # bytes: FP32 [4, 16, 8, 8]
    w, bias = 16 * 16 * 9 * 4, 16 * 4
    assert data.bytes == grad_out + w + x  # reads dy and w, writes dx
    assert weight.bytes == grad_out + x + w + bias  # reads dy and x, writes dw and the bias gradient


def test_a_fused_rmsprop_is_refused_in_one_line_naming_the_fused_optimizers():
    """torch has no fused RMSprop: asking for one is an error that lists the optimizers torch fuses."""
    from prenet.errors import PrenetError
    from prenet.ops import trace_step

    module = nn.Sequential(nn.Linear(8, 4))
    with pytest.raises(PrenetError, match="no fused rmsprop.*sgd, momentum, nesterov, adam, adamw"):
        trace_step(module, (torch.randn(2, 8), torch.randint(0, 4, (2,))), optimizer="rmsprop", fused=True, device_type="cuda")


def test_activations_torch_does_not_tag_pointwise_are_elementwise_ops():
    """Hardswish (MobileNetV3), Mish, GLU, PReLU, RReLU, LogSigmoid and their backwards are untagged in ATen; each is an
    elementwise op of its arithmetic class, not an op of no family (answered by the roofline ÷ the median efficiency, 16×
    its measured time for hardswish on this CPU); every activation of a traced torchvision MobileNetV3 has a family."""
    import torch

    from prenet.ops import trace_step
    from prenet.ops.families import family_of, op_class
    from prenet.torchvision_import import import_torchvision

    for name in ("hardswish_", "hardswish", "mish_", "glu", "glu_backward", "_prelu_kernel", "rrelu_with_noise", "log_sigmoid_forward"):
        assert family_of(name, phase="forward", pointwise=False) == "elementwise", name
    assert op_class("hardswish_") == 0 and op_class("mish_") == op_class("glu") == 2 and op_class("rrelu_with_noise") == 3
    tv = import_torchvision()
    trace = trace_step(tv.models.mobilenet_v3_small(num_classes=10), (torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))))
    assert not [r.op for r in trace.records if r.family == "other"]


def test_the_whole_model_summary_gives_the_mape_as_timed_beside_the_rescaled_one():
    """Whole steps are rescaled to the op benchmark's host speed (a noisy probe); the summary also says what the figure
    is against the steps as timed (each row's own ``timed_ms``)."""
    from prenet.steptime.zoo_evaluation import whole_model_summary

    w = pl.DataFrame(
        {
            "model": ["a", "a"],
            "batch_size": [16, 16],
            "predicted_ms": [10.0, 20.0],
            "measured_ms": [10.0, 20.0],
            "roofline_ms": [5.0, 5.0],
            "spread_rel": [0.01, 0.01],
        }
    )
    s = whole_model_summary(w.with_columns(pl.Series("timed_ms", [8.0, 25.0])))
    assert s["mape_pct"] == 0.0 and s["as_timed_mape_pct"] == pytest.approx(100 * (2 / 8 + 5 / 25) / 2)
    assert "as_timed_mape_pct" not in whole_model_summary(w)
    assert "as_timed_mape_pct" not in whole_model_summary(w.with_columns(pl.col("measured_ms").alias("timed_ms")))  # not rescaled


def test_the_default_op_model_fit_is_the_same_whatever_xgboosts_seed():
    """The project's efficiency-model parameters (``conf/ops``) sample no rows or columns, so a refit on the same data is
    the same model: with sampling the headline figures moved with the seed alone (NeuSight unseen 6.0-6.7 %)."""
    from pipeline.config import compose

    params = dict(compose([]).ops.efficiency.params) | {"n_estimators": 20}
    torch.manual_seed(0)
    module, batch = zoo.build("mlp", 16, {"mlp": {"hidden": 128, "in_features": 64}})
    measured = measure_step(module, batch, min_block_ms=0.05).frame()
    a100 = get("A100 80GB SXM4")
    preds = [EfficiencyModel.fit([(measured, a100)], params=params | {"seed": s}, min_rows=5).predict(measured, a100)["predicted_ms"] for s in (0, 1)]
    assert preds[0].to_list() == preds[1].to_list()
    sampled = [
        EfficiencyModel.fit([(measured, a100)], params=params | {"seed": s, "subsample": 0.8, "colsample_bytree": 0.9}, min_rows=5) for s in (0, 1)
    ]
    assert (
        sampled[0].predict(measured, a100)["predicted_ms"].to_list() != sampled[1].predict(measured, a100)["predicted_ms"].to_list()
    )  # the test can fail


def test_a_unit_no_measurement_covered_is_answered_through_its_sibling_units_kernels(tmp_path):
    """TF32 convolutions were never measured: a family's TF32 ops are answered at the efficiency its trees give the
    same ops in FP16 (the same tensor-core kernels), against their own TF32 roofline, and the answer says so; a unit
    the trees did see keeps its own answer, and the rows per unit survive saving."""
    from prenet.ops.records import as_run_on
    from prenet.steptime.efficiency import feature_matrix

    a100 = get("A100 80GB SXM4")
    module, batch = zoo.build("resnet18", 4, None)

    def measured(precision: str, efficiency: float) -> pl.DataFrame:
        f = trace_step(module, batch, precision=precision, device_type="cuda").frame()
        f = f.filter(pl.col("family") == "conv")
        return f.with_columns(pl.Series("measured_ms", feature_matrix(f, a100)[1] / efficiency))

    fp32, fp16 = measured("fp32", 0.6), measured("fp16", 0.05)
    params = {"n_estimators": 30, "max_depth": 3, "learning_rate": 0.3}
    model = EfficiencyModel.fit([(fp32.with_columns(pl.lit("fp32").alias("unit")), a100), (fp16, a100)], params=params, min_rows=5)
    assert model.unit_rows["gpu/conv"] == {"fp16": fp16.height, "fp32": fp32.height}
    trace = trace_step(module, batch, precision="fp32", device_type="cuda")  # torch's defaults: cuDNN on TF32
    tf32 = as_run_on(trace, trace.frame(), True).filter(pl.col("family") == "conv")
    assert set(tf32["unit"]) == {"tf32"}
    out = model.predict(tf32, a100)
    assert set(out["estimate"]) == {"unit:fp16"}
    assert np.median(out["efficiency"].to_numpy()) == pytest.approx(0.05, rel=0.3)  # FP16's, not FP32's 0.6
    back = EfficiencyModel.load(model.save(tmp_path) or tmp_path)
    assert back.unit_rows == model.unit_rows and back.predict(tf32, a100)["predicted_ms"].to_list() == out["predicted_ms"].to_list()
    seen = EfficiencyModel.fit([(fp32.with_columns(pl.lit("tf32").alias("unit")), a100), (fp16, a100)], params=params, min_rows=5)
    assert set(seen.predict(tf32, a100)["estimate"]) == {"model"}  # TF32 rows of its own: its own trees' answer
    pred, _ = predict_trace(trace, a100, model)
    assert any("CONV in TF32 (as FP16)".lower() in n.lower() for n in pred.notes), pred.notes
    # a spec sheet with TF32 but no FP16 peak (a user's YAML): the unit's own features answer, no error
    from dataclasses import replace

    no_fp16 = replace(a100, hardware_id="tf32-only", peak_fp16_tflops=None)
    assert set(model.predict(tf32, no_fp16)["estimate"]) == {"model"}
    both = model.predict_many(tf32, [a100, no_fp16])  # batched: each hardware answered as on its own
    assert both[0]["predicted_ms"].to_list() == out["predicted_ms"].to_list() and set(both[0]["estimate"]) == {"unit:fp16"}
    assert both[1]["predicted_ms"].to_list() == model.predict(tf32, no_fp16)["predicted_ms"].to_list() and set(both[1]["estimate"]) == {"model"}


def test_the_two_parts_of_the_op_model_load_as_one(tmp_path):
    """train_gpu_ops saves the GPU part and train_ops the CPU part, each in its folder under paths.models_ops: loading
    the folder answers each device as its own part does, with the GPU part's host cost; parts fitted with different
    settings are refused in one line."""
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.efficiency import feature_matrix

    a100 = get("A100 80GB SXM4")
    cpu = HardwareSpec(hardware_id="cpu-x-2c", kind="cpu", peak_fp32_tflops=0.1, mem_bw_gbps=20.0, cores=2, clock_mhz=2000.0)
    module, batch = zoo.build("mlp", 8, {"mlp": {"hidden": 64, "in_features": 32}})

    def measured(hw, device: str, efficiency: float) -> pl.DataFrame:
        f = trace_step(module, batch, device_type=device).frame()
        return f.with_columns(pl.Series("measured_ms", feature_matrix(f, hw)[1] / efficiency))

    gpu_ops, cpu_ops = measured(a100, "cuda", 0.4), measured(cpu, "cpu", 0.2)
    params = {"n_estimators": 10, "max_depth": 3, "learning_rate": 0.3}
    gpu = EfficiencyModel.fit([(gpu_ops, a100)], params=params, min_rows=3)
    gpu.host_ms["gpu"] = 0.004
    cpu_part = EfficiencyModel.fit([(cpu_ops, cpu)], params=params, min_rows=3)
    gpu.save(tmp_path / "gpu")
    cpu_part.save(tmp_path / "cpu")
    both = EfficiencyModel.load(tmp_path)
    assert set(both.boosters) == set(gpu.boosters) | set(cpu_part.boosters) and {k.split("/")[0] for k in both.boosters} == {"gpu", "cpu"}
    assert both.host_ms == {"gpu": 0.004} and both.median_efficiency.keys() == {"gpu", "cpu"}
    assert both.measured_devices == sorted([a100.hardware_id, cpu.hardware_id])
    for ops, hw, part in ((gpu_ops, a100, gpu), (cpu_ops, cpu, cpu_part)):
        assert both.predict(ops, hw)["predicted_ms"].to_list() == part.predict(ops, hw)["predicted_ms"].to_list()
    EfficiencyModel.fit([(cpu_ops, cpu)], params=params, min_rows=4).save(tmp_path / "cpu")
    with pytest.raises(PrenetError, match="fitted with different ops.efficiency settings") as e:
        EfficiencyModel.load(tmp_path)
    assert "\n" not in str(e.value)


def test_a_cpu_step_reads_from_the_last_level_cache_what_its_l2_does_not_hold():
    """Where the roofline runs at the L2's measured bandwidth, a small memory-bound op's operands that the step touched
    too long ago for L2 come from the last-level cache at its bandwidth, those too old for it from DRAM (never both);
    without an L2 reading the roofline is the last-level cache's and nothing is added."""
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.step import cache_sensitive, cold_read_bytes, llc_read_bytes, llc_refetch_ms

    cpu = HardwareSpec(
        "cpu-x-2c", "cpu", peak_fp32_tflops=0.1, mem_bw_gbps=15.0, cores=2, clock_mhz=2000.0, l2_mb=0.5, cache_bw_gbps=30.0, cache_mb=4.0
    )
    with torch.device("meta"):
        module, batch = zoo.build("mlp", 16, None)
    trace = trace_step(module, batch, optimizer="adam", device_type="cpu", threads=1)
    frame, fast = trace.frame(), replace(cpu, l2_bw_gbps=150.0)
    assert llc_read_bytes(trace, cpu, cold_read_bytes(trace, cpu)) is None
    cold = cold_read_bytes(trace, fast)
    llc = llc_read_bytes(trace, fast, cold)
    read = np.array([sum(b for b, _ in r.reads) for r in trace.records], dtype=float)
    assert (llc >= 0).all() and (llc + cold <= read).all() and llc.sum() > 0
    sensitive = cache_sensitive(frame, fast)
    small = frame["bytes"].to_numpy() <= 0.5 * 2**20
    ms = llc_refetch_ms(frame, fast, llc, sensitive)
    assert ms == pytest.approx(llc[sensitive & small].sum() / 30e9 * 1e3) and ms > 0


def test_a_cpu_step_traced_again_reads_the_same_bytes_from_dram():
    """The cache model's reuse distances key each storage by its address: held until the trace ends, no freed storage's
    address is taken by a later one, so every trace of one step gives each op the same reads (three traces of the GRU
    tagger read 20.09-20.18 MB cold while freed addresses were reused, 2026-12-07)."""
    from prenet.hardware.spec import HardwareSpec
    from prenet.steptime.step import cold_read_bytes

    cpu = HardwareSpec(hardware_id="cpu-x-2c", kind="cpu", peak_fp32_tflops=0.1, mem_bw_gbps=20.0, cores=2, clock_mhz=2000.0, cache_mb=4.0)
    reads = []
    for _ in range(3):
        with torch.device("meta"):
            module, batch = zoo.build("gru_tagger", 16, None)
        trace = trace_step(module, batch, device_type="cpu", threads=1)
        reads.append(([r.reads for r in trace.records], cold_read_bytes(trace, cpu).tolist()))
    assert reads[0] == reads[1] == reads[2] and sum(reads[0][1]) > 0
