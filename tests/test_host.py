"""The host's side of a GPU step (prenet.steptime.host): ops issued one after another while the GPU runs earlier ones."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from prenet.steptime.host import fit_host_ms, issue_bound_ms, issued


def test_a_step_is_the_gpus_work_when_it_is_the_bottleneck_and_the_hosts_issue_time_when_that_is():
    g = np.array([1.0, 2.0, 3.0])
    every = np.ones(3)
    assert issue_bound_ms(g, every, 0.0) == 6.0
    assert issue_bound_ms(g, every, 0.1) == pytest.approx(0.1 + 6.0)  # the GPU waits only for the first op
    assert issue_bound_ms(np.full(100, 0.01), np.ones(100), 0.05) == pytest.approx(100 * 0.05 + 0.01)  # host-bound
    # the step ends at the latest (issue time of op i + the GPU work from op i on)
    assert issue_bound_ms(np.array([0.1, 1.0, 1.0, 0.1]), np.ones(4), 1.0) == pytest.approx(max(1 + 2.2, 2 + 2.1, 3 + 1.1, 4 + 0.1))


def test_cudnns_layout_transposes_cost_gpu_time_but_no_host_time():
    ops = pl.DataFrame({"op": ["convolution", "nchwToNhwc", "nhwcToNchw", "relu"], "module": ["c", "c", "c", "r"], "shapes": ["x", "x", "y", "y"]})
    assert issued(ops).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert issue_bound_ms(np.full(4, 0.001), issued(ops), 1.0) == pytest.approx(2.0 + 0.001)


def test_a_convolution_backward_is_one_issue_for_its_two_kernels():
    """A CUDA trace records backward-data and backward-filter of one call as two rows; the host issued one call."""
    import torch
    from torch import nn

    from prenet.ops import trace_step

    with torch.device("meta"):
        module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.Flatten(), nn.Linear(16 * 64, 4))
    batch = (torch.empty(4, 8, 8, 8, device="meta"), torch.zeros(4, dtype=torch.long, device="meta"))
    cuda, cpu = (trace_step(module, batch, optimizer="sgd", device_type=d).frame_for(False) for d in ("cuda", "cpu"))  # no TF32: no transposes
    convs = lambda f: f.filter(pl.col("op") == "convolution_backward").height  # noqa: E731
    assert (convs(cuda), convs(cpu)) == (3, 2)  # the second convolution's backward: two kernels on CUDA
    assert issued(cuda).sum() == cuda.height - 1 and issued(cpu).sum() == cpu.height


def test_the_fit_recovers_the_host_cost_that_made_the_steps():
    rng = np.random.default_rng(0)
    steps = []
    for n in (50, 200, 400, 800):
        g = rng.uniform(0.001, 0.2, n)
        steps.append((issue_bound_ms(g, np.ones(n), 0.03) + 0.5, g, np.ones(n), 0.5))
    h, mape = fit_host_ms(steps)
    assert h == pytest.approx(0.03, abs=5e-4) and mape < 0.5


def test_host_bound_steps_say_so_and_calibration_rows_stay_out_of_the_test_figures():
    """A SqueezeNet at batch 12 issues hundreds of small ops: with a host cost its predicted A100 step is at least their
    issue time and the answer says host-bound; the fit on its measured steps finds a cost > 0; the evaluation keeps
    calibration rows out of the ResNet/VGG figures."""
    from prenet.hardware.catalog import get
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.reference_models import torchvision_model
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.reference_evaluation import fit_host, load_ryujaehun_rows, ryujaehun_summary, ryujaehun_whole_model
    from prenet.steptime.step import predict_trace

    module, example = build_on_meta(lambda batch_size: torchvision_model("squeezenet1_1", batch_size=batch_size), batch_size=12)
    trace = trace_step(module, example, optimizer="sgd", device_type="cuda")
    model = EfficiencyModel(median_efficiency={"gpu": 0.5})
    gpu_only, ops = predict_trace(trace, get("A100 40GB SXM4"), model)
    assert gpu_only.step_seconds * 1e3 == pytest.approx(float(ops["predicted_ms"].sum()))
    model.host_ms["gpu"] = 0.05
    pred, _ = predict_trace(trace, get("A100 40GB SXM4"), model)
    n = int(issued(ops).sum())
    assert pred.host_issue_ms == pytest.approx(n * 0.05) and pred.step_seconds * 1e3 >= pred.host_issue_ms
    assert any(note.startswith("host-bound") for note in pred.notes)

    rows = load_ryujaehun_rows().filter(pl.col("model").is_in(["squeezenet1_1", "resnet18"]) & (pl.col("precision") == "fp32"))
    h, mape, steps = fit_host(EfficiencyModel(median_efficiency={"gpu": 0.5}), rows)
    assert steps == rows.filter(pl.col("model") == "squeezenet1_1").height > 0 and h > 0
    df = ryujaehun_whole_model(model, rows)
    tests = df.filter(~pl.col("calibration"))
    assert (tests["host_ms"] > 0).all() and (df.filter(pl.col("calibration"))["host_ms"] == 0.05).all()  # refitted per held-out GPU
    summary = ryujaehun_summary(df)
    assert summary["host_calibration"]["n"] == steps
    assert summary["unseen_fp32"]["n"] + summary["kernels_seen_fp32"]["n"] == rows.filter(pl.col("model") == "resnet18").height


def test_a_cpu_step_adds_its_convolutions_in_step_share_of_their_predicted_time():
    """A CPU step's convolutions take the measured in-step share longer than their in-place times (the answer says
    so); the per-op table and the other ops keep their times; a GPU step adds nothing."""
    import torch
    from torch import nn

    from prenet.hardware.catalog import get
    from prenet.hardware.spec import HardwareSpec
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import predict_trace

    model = EfficiencyModel(median_efficiency={"cpu": 0.5, "gpu": 0.5})
    cpu = HardwareSpec(hardware_id="test-cpu", kind="cpu", peak_fp32_tflops=1.0, mem_bw_gbps=50.0, cores=1, clock_mhz=3000.0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4))
    batch = (torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,)))
    net(batch[0])
    trace = trace_step(net, batch, device_type="cpu", threads=1)
    bare, ops = predict_trace(trace, cpu, model, module_call_ms=0.0, conv_sequence_share=0.0)
    pred, ops2 = predict_trace(trace, cpu, model, module_call_ms=0.0, conv_sequence_share=0.2)
    conv_ms = float(ops.filter(pl.col("family").str.starts_with("conv"))["predicted_ms"].sum())
    assert conv_ms > 0 and pred.conv_sequence_ms == pytest.approx(0.2 * conv_ms)
    assert pred.step_seconds == pytest.approx(bare.step_seconds + 0.2 * conv_ms / 1e3) and pred.family_ms == bare.family_ms
    assert any(n.startswith("convolutions: ") for n in pred.notes) and not any(n.startswith("convolutions: ") for n in bare.notes)
    gpu_trace = trace_step(net, batch, device_type="cuda")
    gpu, _ = predict_trace(gpu_trace, get("A100 40GB SXM4"), model, conv_sequence_share=0.2)
    assert gpu.conv_sequence_ms == 0.0


def test_a_cpu_step_adds_its_module_calls_at_the_measured_host_cost_after_its_ops():
    """On a CPU the host issues and runs the ops in turn: the step is its ops plus its module calls (``module_calls``:
    the modules its forward ops ran in) times the measured cost, which the answer reports; a GRU's per-timestep ops,
    issued by one module call, add one call's cost, not one per op. A GPU ignores the CPU's cost."""
    import torch
    from torch import nn

    from prenet.hardware.catalog import get
    from prenet.hardware.spec import HardwareSpec
    from prenet.ops import trace_step
    from prenet.ops.records import module_calls
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import predict_trace

    model = EfficiencyModel(median_efficiency={"cpu": 0.5, "gpu": 0.5})
    cpu = HardwareSpec(hardware_id="test-cpu", kind="cpu", peak_fp32_tflops=1.0, mem_bw_gbps=50.0, cores=1, clock_mhz=3000.0)
    mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    batch = (torch.randn(2, 16), torch.randint(0, 4, (2,)))
    trace = trace_step(mlp, batch, device_type="cpu", threads=1)
    assert module_calls(trace.records) == 5
    bare, ops = predict_trace(trace, cpu, model, module_call_ms=0.0)
    pred, _ = predict_trace(trace, cpu, model, module_call_ms=0.01)
    assert pred.host_issue_ms == pytest.approx(5 * 0.01) and pred.step_seconds == pytest.approx(bare.step_seconds + 5e-5)

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 8, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gru(x)[0]

    g = trace_step(Tagger(), (torch.randn(2, 20, 8), torch.randn(2, 20, 8)), device_type="cpu", threads=1)
    assert len([r for r in g.records if r.phase == "forward"]) > 20 and module_calls(g.records) == 1
    gpu_trace = trace_step(mlp, batch, device_type="cuda")
    gpu, gops = predict_trace(gpu_trace, get("A100 40GB SXM4"), model, module_call_ms=0.01)
    assert gpu.host_issue_ms == 0.0 and gpu.step_seconds * 1e3 == pytest.approx(float(gops["predicted_ms"].sum()))
