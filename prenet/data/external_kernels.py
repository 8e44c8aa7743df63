"""Measured low-precision GPU kernels as ops: DeepBench's cuBLAS GEMMs and cuDNN convolutions (V100 and T4 in FP32
and FP16-in/FP32-accumulate on tensor cores, GTX 1080 Ti in FP32; forward, backward-data and backward-weights) and
XLA's H100 matmul table (BF16 and FP32 inputs on TF32 tensor cores). Each row's kernel is traced on the meta device
into the op record a traced model gives (same FLOPs, bytes, GEMM view, dtype and unit), with the kernel's time as
``measured_ms``; ``precision`` is what a training job would call it (``fp16``, ``bf16``, ``tf32``, ``fp32``). DeepBench's
FP16 convolutions ran on NCHW tensors: their times less cuDNN's layout transposes (:func:`conv_kernel_ms`), which a
model's CUDA trace holds as ops of their own.

What is left out: P100's "pseudo FP16" (FP16 storage, FP32 math: no job runs it), the Titan and M40 rows (not in the
hardware catalog), DeepBench's inference rows (int8) and XLA's FP8 rows (no FP8 path in prenet), and the B200 and AMD
rows of the XLA table (not in the catalog). Sources and licences: ``data/external/README.md``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import torch
import torch.nn.functional as F

from prenet.hardware.catalog import get, resolve_name
from prenet.hardware.spec import HardwareSpec
from prenet.ops.records import OP_SCHEMA
from prenet.ops.families import LAYOUT_TRANSPOSES
from prenet.ops.trace import trace_call
from prenet.paths import data_dir
from prenet.steptime.efficiency import roofline_bandwidth_gbps

#: DeepBench's GPU names → catalog names, and its precision labels → (torch dtype, job precision)
DEEPBENCH_GPUS = {"NVIDIA V100": "V100 SXM2", "NVIDIA T4": "Tesla T4", "NVIDIA GTX 1080 Ti": "GTX 1080 Ti"}
DEEPBENCH_PRECISIONS = {"fp32": (torch.float32, "fp32"), "fp16_in_fp32_acc": (torch.float16, "fp16")}
#: XLA's device keys → catalog names (``sm_90`` is the H100 SXM, per the table's comments), and its dtypes
XLA_GPUS = {"sm_90": "H100 SXM5 80GB"}
XLA_DTYPES = {"bf16xbf16->bf16": (torch.bfloat16, "bf16"), "f32xf32->f32": (torch.float32, "tf32")}
_RECORD_COLS = [k for k in OP_SCHEMA if k not in ("measured_ms", "spread_rel")]
_OUT = ["source", "kind", "hardware_id", "config_id", "precision", "tf1", "kernel_only", *_RECORD_COLS, "measured_ms"]


def _m(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def _record(records: list, phase: str) -> dict:
    """The op record (as a dict) of the largest op of a traced call, with the phase the kernel runs in."""
    main = max(records, key=lambda r: (r.flops, r.bytes))
    return {**{k: getattr(main, k) for k in _RECORD_COLS}, "phase": phase}


def gemm_op(m: int, n: int, k: int, *, a_t: bool, b_t: bool, batch: int, dtype: torch.dtype, precision: str) -> dict:
    """The op of ``C[m×n] = op(A)[m×k] · op(B)[k×n]`` (``batch`` of them: ``bmm``), A or B stored transposed."""
    a = _m((batch, k, m), dtype).transpose(-1, -2) if a_t else _m((batch, m, k), dtype)
    b = _m((batch, n, k), dtype).transpose(-1, -2) if b_t else _m((batch, k, n), dtype)
    if batch == 1:
        return _record(trace_call(torch.mm, a[0], b[0], precision=precision), "forward")
    return _record(trace_call(torch.bmm, a, b, precision=precision), "forward")


def conv_ops(s: dict, *, dtype: torch.dtype, precision: str) -> list[tuple[str, dict, float]]:
    """(pass, op, layout-transpose bytes) of one DeepBench convolution: ``fwd`` → ``convolution``; ``bwd_data`` and
    ``bwd_weights`` → ``convolution_backward`` with one output of its mask each, as cuDNN times them. DeepBench's
    tensors are NCHW (``conv_bench.cu``), so an FP16 call on tensor cores also runs cuDNN's layout transposes inside
    the timed call: their bytes (read and write, as a CUDA trace records them around a model's NCHW convolution)."""
    x = _m((s["N"], s["C"], s["H"], s["W"]), dtype)
    w = _m((s["K"], s["C"], s["R_filter_height"], s["S_filter_width"]), dtype)
    stride, pad = [s["stride_h"], s["stride_w"]], [s["pad_h"], s["pad_w"]]
    fwd = trace_call(lambda a, b: F.conv2d(a, b, None, stride, pad), x, w, precision=precision, cuda=True)
    y = F.conv2d(x, w, None, stride, pad)  # the output gradient's shape (meta: no compute)
    out = [("fwd", _record(fwd, "forward"), _transpose_bytes(fwd))]
    for name, mask in (("bwd_data", [True, False, False]), ("bwd_weights", [False, True, False])):
        call = lambda g, a, b, mask=mask: torch.ops.aten.convolution_backward(g, a, b, None, stride, pad, [1, 1], False, [0, 0], 1, mask)  # noqa: E731
        recs = trace_call(call, y, x, w, precision=precision, cuda=True)
        out.append((name, _record(recs, "backward"), _transpose_bytes(recs)))
    return out


def _transpose_bytes(records: list) -> float:
    return float(sum(r.bytes for r in records if r.op in LAYOUT_TRANSPOSES))


def conv_kernel_ms(measured_ms: float, transpose_bytes: float, hw: HardwareSpec) -> float:
    """A DeepBench call's time less its layout transposes, each costed at the DRAM roofline (a lower bound, so never
    more is taken off than they can cost), and at least half the call: the convolution kernel's own time, the op a
    model's trace holds beside its own transposes (none for ``channels_last``)."""
    transposes_ms = transpose_bytes / (roofline_bandwidth_gbps(hw) * 1e9) * 1e3
    return max(measured_ms - transposes_ms, 0.5 * measured_ms)


def _number(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None  # DeepBench's ``N/A*``: a pass it does not run


def load_deepbench_ops(root: Path | None = None) -> pl.DataFrame:
    """DeepBench's training GEMMs and convolutions on the catalog GPUs, one op row per kernel and pass."""
    ext = (root or data_dir()) / "external" / "deepbench"
    rows: list[dict] = []
    gemm = pl.read_csv(ext / "deepbench_gemm.csv.gz", infer_schema_length=0)
    for r in gemm.iter_rows(named=True):
        if r["gpu"] not in DEEPBENCH_GPUS or r["precision"] not in DEEPBENCH_PRECISIONS:
            continue
        dtype, prec = DEEPBENCH_PRECISIONS[r["precision"]]
        m, n, k = int(r["M"]), int(r["N"]), int(r["K"])
        op = gemm_op(m, n, k, a_t=r["a_transpose"] == "T", b_t=r["b_transpose"] == "T", batch=1, dtype=dtype, precision=prec)
        cid = f"deepbench_gemm,{m},{n},{k},{r['a_transpose']}{r['b_transpose']}"
        rows.append(
            {
                "source": "deepbench2019",
                "kind": "gemm",
                "hardware_id": resolve_name(DEEPBENCH_GPUS[r["gpu"]]),
                "config_id": cid,
                "precision": prec,
                "tf1": 0,
                "kernel_only": 1,
                **op,
                "measured_ms": float(r["time_ms"]),
            }
        )
    conv = pl.read_csv(ext / "deepbench_conv.csv.gz", infer_schema_length=0)
    shape_cols = ["W", "H", "C", "N", "K", "S_filter_width", "R_filter_height", "pad_w", "pad_h", "stride_w", "stride_h"]
    for r in conv.iter_rows(named=True):
        if r["gpu"] not in DEEPBENCH_GPUS or r["precision"] not in DEEPBENCH_PRECISIONS:
            continue
        dtype, prec = DEEPBENCH_PRECISIONS[r["precision"]]
        s = {c: int(r[c]) for c in shape_cols}
        cid = "deepbench_conv," + ",".join(str(s[c]) for c in shape_cols)
        hw = get(DEEPBENCH_GPUS[r["gpu"]])
        for name, op, transposes in conv_ops(s, dtype=dtype, precision=prec):
            ms = _number(r[f"{name}_ms"])
            if ms is None or ms <= 0:
                continue
            ms = conv_kernel_ms(ms, transposes, hw)
            rows.append(
                {
                    "source": "deepbench2019",
                    "kind": f"conv_{name}",
                    "hardware_id": resolve_name(DEEPBENCH_GPUS[r["gpu"]]),
                    "config_id": cid,
                    "precision": prec,
                    "tf1": 0,
                    "kernel_only": 1,
                    **op,
                    "measured_ms": ms,
                }
            )
    return _frame(rows)


def load_xla_matmul_ops(root: Path | None = None) -> pl.DataFrame:
    """XLA's measured H100 matmuls (BF16; FP32 on TF32 tensor cores), one op row per shape and dtype."""
    table = pl.read_csv((root or data_dir()) / "external" / "xla_perf_tables" / "xla_matmul_perf_table_sm90.csv.gz")
    rows = []
    for r in table.iter_rows(named=True):
        if r["gpu_key"] not in XLA_GPUS or r["dtype"] not in XLA_DTYPES:
            continue
        dtype, prec = XLA_DTYPES[r["dtype"]]
        op = gemm_op(r["m"], r["n"], r["k"], a_t=False, b_t=False, batch=r["b"], dtype=dtype, precision=prec)
        rows.append(
            {
                "source": "xla2026",
                "kind": "gemm",
                "hardware_id": resolve_name(XLA_GPUS[r["gpu_key"]]),
                "config_id": f"xla_matmul,{r['b']},{r['m']},{r['n']},{r['k']}",
                "precision": prec,
                "tf1": 0,
                "kernel_only": 1,
                **op,
                "measured_ms": float(r["derived_time_us"]) / 1e3,
            }
        )
    return _frame(rows)


def _frame(rows: list[dict]) -> pl.DataFrame:
    schema = {
        "source": pl.String,
        "kind": pl.String,
        "hardware_id": pl.String,
        "config_id": pl.String,
        "precision": pl.String,
        "tf1": pl.Int64,
        "kernel_only": pl.Int64,
        **{k: OP_SCHEMA[k] for k in _RECORD_COLS},
        "measured_ms": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema).select(_OUT)


def load_kernel_ops(root: Path | None = None) -> pl.DataFrame:
    """Every vendored low-precision kernel table as op rows (DeepBench, then XLA)."""
    return pl.concat([load_deepbench_ops(root), load_xla_matmul_ops(root)], how="vertical_relaxed")
