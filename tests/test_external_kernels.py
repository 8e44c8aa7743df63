"""The measured low-precision kernel tables (DeepBench, XLA) as the ops a traced model gives."""

import polars as pl
import pytest
import torch

from prenet.data.external_kernels import conv_kernel_ms, conv_ops, gemm_op, load_kernel_ops
from prenet.data.schemas import OpTimings
from prenet.hardware import catalog
from prenet.steptime.efficiency import peaks


def test_gemm_row_is_the_mm_a_model_runs_with_its_transposes_and_unit():
    op = gemm_op(1760, 16, 1760, a_t=True, b_t=False, batch=1, dtype=torch.float16, precision="fp16")
    assert (op["op"], op["dtype"], op["unit"], op["phase"]) == ("mm", "float16", "fp16", "forward")
    assert (op["m"], op["n"], op["k"], op["flops"]) == (1760, 16, 1760, 2.0 * 1760 * 16 * 1760)
    assert op["layout"] == 1  # A stored transposed, B not
    assert op["bytes"] == 2 * (1760 * 1760 + 1760 * 16 + 1760 * 16)


def test_batched_fp32_matmul_on_tf32_tensor_cores():
    op = gemm_op(256, 512, 1024, a_t=False, b_t=False, batch=4, dtype=torch.float32, precision="tf32")
    assert (op["op"], op["dtype"], op["unit"], op["batch"]) == ("bmm", "float32", "tf32", 4)
    assert op["flops"] == 2.0 * 4 * 256 * 512 * 1024


def test_conv_passes_are_forward_and_one_output_backward_ops():
    s = {"W": 56, "H": 56, "C": 64, "N": 8, "K": 128, "S_filter_width": 3, "R_filter_height": 3, "pad_w": 1, "pad_h": 1, "stride_w": 1, "stride_h": 1}
    passes = conv_ops(s, dtype=torch.float16, precision="fp16")
    ops = {name: op for name, op, _ in passes}
    assert ops["fwd"]["op"] == "convolution" and ops["fwd"]["phase"] == "forward"
    for name in ("bwd_data", "bwd_weights"):
        assert ops[name]["op"] == "convolution_backward" and ops[name]["phase"] == "backward"
        assert ops[name]["flops"] == ops["fwd"]["flops"]  # one gradient: the forward's multiply-adds
    assert {o["unit"] for o in ops.values()} == {"fp16"}
    # DeepBench's tensors are NCHW: an FP16 call also transposes its operands (x 8x64x56x56 in, y 8x128x56x56 out)
    x, y = 8 * 64 * 56 * 56 * 2, 8 * 128 * 56 * 56 * 2
    assert {name: b for name, _, b in passes}["fwd"] >= 2 * (x + y)
    assert all(b == 0 for _, _, b in conv_ops(s, dtype=torch.float32, precision="fp32"))


def test_a_deepbench_calls_transposes_come_off_its_time_at_most_by_half():
    v100 = catalog()["V100 SXM2"]
    gb = 1e9  # bytes: 1 GB at 900 GB/s is 1.11 ms
    assert conv_kernel_ms(5.0, gb, v100) == pytest.approx(5.0 - 1e3 / v100.mem_bw_gbps)
    assert conv_kernel_ms(1.0, gb, v100) == 0.5  # never more than half: the roofline says the kernel ran too
    assert conv_kernel_ms(1.0, 0.0, v100) == 1.0


def test_every_kernel_row_is_a_valid_op_on_a_catalog_gpu_with_that_unit():
    df = load_kernel_ops()
    OpTimings.validate(df.with_columns(pl.lit(0, dtype=pl.Int64).alias("threads")))
    assert set(df["hardware_id"]) == {"V100 SXM2", "Tesla T4", "GTX 1080 Ti", "H100 SXM5 80GB"}
    assert set(df["precision"]) == {"fp32", "fp16", "bf16", "tf32"}
    assert set(df.filter(pl.col("phase") == "backward")["op"]) == {"convolution_backward"}
    cat = catalog()
    for (hw,), rows in df.group_by(["hardware_id"]):
        assert (peaks(rows, cat[hw]) > 0).all()  # the spec sheet has every unit the rows ran on
        # no GEMM beyond the spec sheet's dense peak (convolutions may: cuDNN's FFT/Winograd); a GTX 1080 Ti's GPU Boost
        # runs ~7 % above its rated boost clock (12.1 of 11.3 TFLOP/s in DeepBench)
        gemm = rows.filter(pl.col("family") == "gemm")
        assert (gemm["flops"].to_numpy() / (gemm["measured_ms"].to_numpy() * 1e-3) <= peaks(gemm, cat[hw]) * 1.08).all()
