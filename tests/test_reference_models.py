"""The published-architecture models and the whole-model checks against DeepLearningExamples' measured throughput
and pytorch-gpu-benchmark's measured torchvision steps."""

from dataclasses import replace
from functools import partial

import polars as pl
import pytest
import torch

from prenet.hardware.catalog import get
from prenet.meta_device import build_on_meta
from prenet.ops import trace_step
from prenet.reference_models import REFERENCE_MODELS, TORCHVISION_PARAMS, torchvision_model
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.reference_evaluation import (
    dle_summary,
    dle_whole_model,
    load_dle_rows,
    load_ryujaehun_rows,
    ryujaehun_summary,
    ryujaehun_whole_model,
)
from prenet.steptime.step import grad_accumulation_records, predict_trace, zero_grad_records


@pytest.mark.parametrize("name, params_m", [("ResNeXt101-32x4d", 44.18), ("SE-ResNeXt101-32x4d", 48.96)])
def test_reference_models_have_the_published_parameter_counts(name, params_m):
    module, (x, y) = build_on_meta(REFERENCE_MODELS[name], batch_size=2)
    assert sum(p.numel() for p in module.parameters()) / 1e6 == pytest.approx(params_m, abs=0.01)
    assert tuple(x.shape) == (2, 3, 224, 224) and tuple(y.shape) == (2,)


def test_the_transformer_big_is_fairseqs_with_its_token_batch():
    """6 + 6 layers of 1024, 16 heads, FFN 4096, one 32,768-token embedding shared by source, target and output:
    209.9 M parameters (Vaswani et al.'s 213 M counts a 37,000-token vocabulary: + 4.3 M); --max-tokens 10240 is 320
    pairs of 32 tokens."""
    module, (x, y) = build_on_meta(REFERENCE_MODELS["Transformer (big, WMT14 en-de)"], batch_size=10240)
    assert sum(p.numel() for p in module.parameters()) == 209_915_904
    assert tuple(x.shape) == (320, 64) and tuple(y.shape) == (320 * 32,)


@pytest.mark.parametrize(
    "name, params, size",
    [
        ("efficientnet-b0", 5_288_548, 224),
        ("efficientnet-b4", 19_341_616, 380),
        ("efficientnet-widese-b0", 8_423_848, 224),
        ("efficientnet-widese-b4", 34_927_246, 380),
    ],
)
def test_efficientnets_are_built_as_deeplearningexamples_builds_them(name, params, size):
    """B0 / B4 have torchvision's (and the paper's 5.3 M / 19 M) parameter counts; WideSE squeezes the expanded channels
    (wider excitation layers, same convolutions); B4's residual blocks carry stochastic depth (a scalar mask)."""
    module, (x, _) = build_on_meta(REFERENCE_MODELS[name], batch_size=2, image_size=size)
    assert sum(p.numel() for p in module.parameters()) == params and tuple(x.shape) == (2, 3, size, size)
    trace = trace_step(
        module,
        (x, torch.zeros(2, dtype=torch.long, device="meta")),
        optimizer="adam",
        precision="fp16",
        device_type="cuda",
        memory_format="channels_last",
    )
    ops = {r.op for r in trace.records}
    assert ("addcmul" in ops) == name.endswith("b4")


def test_dle_rows_are_single_gpu_steps_in_three_precisions_on_catalog_gpus():
    rows = load_dle_rows()
    assert rows.height == 34 and set(rows["precision"]) == {"fp16", "tf32", "fp32"}
    assert set(rows["hardware_id"]) == {"A100 80GB SXM4", "A100 40GB SXM4", "V100 SXM2"}
    # the Transformer (big): --max-tokens per GPU over tokens/s, no image size
    t = rows.filter((pl.col("model") == "Transformer (big, WMT14 en-de)") & (pl.col("dle_gpu") == "A100 40GB") & (pl.col("precision") == "tf32"))
    assert t.row(0, named=True)["measured_ms"] == pytest.approx(10240 / 51057 * 1e3) and t["image_size"].is_null().all()
    # EfficientNet: the rows the collection flags (the "V100 32GB" table) are left out; B4 runs at 380²
    eff = rows.filter(pl.col("model").str.starts_with("efficientnet"))
    assert eff.height == 16 and "V100 32GB" not in set(eff["dle_gpu"])
    assert set(eff.filter(pl.col("model").str.ends_with("b4"))["image_size"]) == {380}
    r = rows.filter((pl.col("model") == "ResNeXt101-32x4d") & (pl.col("dle_gpu") == "A100 80GB") & (pl.col("precision") == "fp16")).row(0, named=True)
    assert r["batch"] == 128 and r["measured_ms"] == pytest.approx(128 / 1211 * 1e3)


def test_whole_model_check_predicts_every_row_through_the_step_path():
    rows = load_dle_rows().filter(pl.col("model") == "ResNeXt101-32x4d")
    df = dle_whole_model(EfficiencyModel(median_efficiency={"gpu": 0.5}), rows)  # no trees: roofline ÷ 0.5
    assert df.height == rows.height and (df["predicted_ms"] > 0).all() and df["compute_share"].is_between(0.05, 0.95).all()
    fp16 = df.filter((pl.col("precision") == "fp16") & (pl.col("dle_gpu") == "A100 80GB"))["predicted_ms"][0]
    tf32 = df.filter((pl.col("precision") == "tf32") & (pl.col("dle_gpu") == "A100 80GB"))["predicted_ms"][0]
    assert fp16 < tf32  # same batch: tensor-core FP16 beats TF32 on an A100
    s = dle_summary(df)
    assert s["n"] == rows.height and set(s["per_precision"]) == {"fp16", "tf32", "fp32"}
    assert s["models"] == 1 and s["per_model"]["ResNeXt101-32x4d"]["n"] == rows.height


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_torchvision_architectures_have_torchvisions_parameter_counts(name):
    module, (x, _) = build_on_meta(partial(torchvision_model, name), batch_size=2)
    assert sum(p.numel() for p in module.parameters()) == TORCHVISION_PARAMS[name]
    assert tuple(x.shape) == (2, 3, 224, 224)


def test_an_unknown_torchvision_name_lists_the_choices():
    with pytest.raises(KeyError, match="resnet50"):
        torchvision_model("mobilenet_v3_large")


def test_pytorch_gpu_benchmark_rows_are_single_gpu_fp32_and_pure_fp16_steps_of_the_built_architectures():
    rows = load_ryujaehun_rows()
    assert set(rows["model"]) <= set(TORCHVISION_PARAMS) and (rows["batch"] == 12).all()
    assert set(rows["hardware_id"]) == {"GTX 1080 Ti", "TITAN Xp", "TITAN V", "RTX 2080 Ti", "TITAN RTX", "A100 40GB SXM4"}
    assert set(rows.filter(pl.col("precision") == "tf32")["hardware_id"]) == {"A100 40GB SXM4"}
    # model.half() rows only where the spec sheet has an FP16 unit (not the Pascal boards)
    assert set(rows.filter(pl.col("precision") == "fp16_pure")["hardware_id"]) == {"TITAN V", "RTX 2080 Ti", "TITAN RTX", "A100 40GB SXM4"}
    assert rows.select("model", "hardware_id", "precision").is_unique().all()  # the files repeated in results/2080ti(2)/ are dropped
    r = rows.filter((pl.col("model") == "resnet18") & (pl.col("hardware_id") == "GTX 1080 Ti")).row(0, named=True)
    assert r["measured_ms"] == pytest.approx(22.6175) and r["kernels_seen"]


def test_torchvision_check_predicts_the_benchmark_loop_without_the_optimizer_plus_the_input_copy():
    """The benchmark's loop (torch 1.x): ``model.zero_grad()`` zeroes each gradient (one fill per parameter) and the
    backward adds into it (one add per parameter); no optimizer step; the batch's copy to the GPU."""
    rows = load_ryujaehun_rows().filter(pl.col("model") == "resnet18")
    model = EfficiencyModel(median_efficiency={"gpu": 0.5})  # no trees: roofline ÷ 0.5
    df = ryujaehun_whole_model(model, rows)
    assert df.height == rows.height and (df["h2d_ms"] > 0).all()
    # the same step with its optimizer: the check's figure is that step less the optimizer phase, plus the loop's
    # per-parameter ops and the copy
    module, example = build_on_meta(partial(torchvision_model, "resnet18"), batch_size=12)
    trace = trace_step(module, example, optimizer="sgd", precision="fp32", device_type="cuda")
    loop = zero_grad_records(module) + grad_accumulation_records(module)
    n_params = sum(1 for p in module.parameters() if p.requires_grad)
    assert [r.op for r in loop] == ["zero_"] * n_params + ["add_"] * n_params
    pred, ops = predict_trace(trace, get("TITAN V"), model)
    looped, _ = predict_trace(replace(trace, records=loop), get("TITAN V"), model)
    optimizer_ms = float(ops.filter(pl.col("phase") == "optimizer")["predicted_ms"].sum())
    row = df.filter((pl.col("hardware_id") == "TITAN V") & (pl.col("precision") == "fp32")).row(0, named=True)
    assert optimizer_ms > 0 and looped.step_seconds > 0
    assert row["predicted_ms"] == pytest.approx((pred.step_seconds + looped.step_seconds) * 1e3 - optimizer_ms + row["h2d_ms"], rel=1e-6)
    s = ryujaehun_summary(df)
    assert s["unseen_fp32"]["n"] == 4 and s["kernels_seen_fp32"]["n"] == 1 and s["a100_tf32"]["n"] == 1
    assert set(s["per_gpu"]) == {"TITAN Xp", "TITAN V", "RTX 2080 Ti", "TITAN RTX"}
    # model.half(): the same step traced in FP16 throughout (convolutions on the FP16 tensor cores), no autocast casts
    half, batch = module.half(), (example[0].half(), example[1])
    h_pred, h_ops = predict_trace(trace_step(half, batch, optimizer="sgd", precision="fp32", device_type="cuda"), get("TITAN V"), model)
    assert set(h_ops.filter(pl.col("family") == "conv")["unit"]) == {"fp16"} and h_ops.filter(pl.col("op") == "_to_copy").height == 0
    h_row = df.filter((pl.col("hardware_id") == "TITAN V") & (pl.col("precision") == "fp16_pure")).row(0, named=True)
    h_opt = float(h_ops.filter(pl.col("phase") == "optimizer")["predicted_ms"].sum())
    h_loop, _ = predict_trace(replace(trace, records=zero_grad_records(half) + grad_accumulation_records(half)), get("TITAN V"), model)
    assert h_row["predicted_ms"] == pytest.approx((h_pred.step_seconds + h_loop.step_seconds) * 1e3 - h_opt + h_row["h2d_ms"], rel=1e-6)
    assert h_row["predicted_ms"] < row["predicted_ms"] and not h_row["calibration"]
    assert s["fp16_pure"]["n"] == 4 and set(s["fp16_pure_per_gpu"]) == {"TITAN V", "RTX 2080 Ti", "TITAN RTX", "A100 40GB SXM4"}


def test_dle_steps_are_traced_as_each_readme_runs_amp():
    """The Transformer's AMP is apex O2 (fp16 weights and activations, no per-op casts; apex's FusedAdam on FP32 master
    weights); the ConvNets' is autocast in channels_last (casts of the weights, no cuDNN layout transposes)."""
    from prenet.steptime.reference_evaluation import trace_dle_step

    o2 = trace_dle_step("Transformer (big, WMT14 en-de)", "fp16", 64)
    gemms = [r for r in o2.records if r.family == "gemm"]
    assert gemms and {r.unit for r in gemms} == {"fp16"} and not any(r.op == "_to_copy" for r in o2.records if r.phase != "optimizer")
    n = o2.params
    opt = [r for r in o2.records if r.phase == "optimizer"]
    to32 = [r for r in opt if r.op == "_to_copy"]  # each FP16 gradient into its FP32 master gradient: 2 + 4 bytes
    back = [r for r in opt if r.op == "copy_"]  # each FP32 master weight into its FP16 weight
    adam = [r for r in opt if r.op == "_fused_adam_"]  # one kernel over the FP32 masters, their grads and moments
    assert len(to32) == len(back) > 0 and sum(r.bytes for r in to32) == 6 * n and {r.dtype for r in to32} == {"float32"}
    # reads p, g, m, v and writes p, m, v (4 bytes each), and each tensor's step count
    assert len(adam) == 1 and adam[0].dtype == "float32" and adam[0].bytes == 28 * n + 4 * len(back)
    from prenet.errors import PrenetError
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.reference_models import REFERENCE_MODELS

    module, example = build_on_meta(REFERENCE_MODELS["Transformer (big, WMT14 en-de)"], batch_size=64)
    with pytest.raises(PrenetError, match="call model.half"):  # FP32 weights: no master copies to keep
        trace_step(module, example, optimizer="adam", device_type="cuda", master_weights=True)
    with pytest.raises(PrenetError, match="use precision fp32"):
        trace_step(module, example, optimizer="adam", precision="fp16", device_type="cuda", master_weights=True)
    amp = trace_dle_step("ResNeXt101-32x4d", "fp16", 2)
    assert any(r.op == "_to_copy" for r in amp.records) and not any(r.op in ("nchwToNhwc", "nhwcToNchw") for r in amp.records)
    assert {r.unit for r in amp.records if r.family == "conv"} == {"fp16"}
