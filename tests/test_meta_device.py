"""Meta traces at CLI speed, with the outputs torch's own meta kernels give: batch norm's shortcut, and no
``torch._dynamo`` import."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from prenet.ops.trace import _meta_shortcut

aten = torch.ops.aten


@pytest.mark.parametrize(
    "shape, channels_last", [((4, 6, 5, 5), False), ((4, 6, 5, 5), True), ((4, 6, 7), False), ((4, 6), False), ((2, 6, 3, 3, 3), False)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_shortcut_gives_what_the_meta_kernel_gives(shape, channels_last, dtype, training):
    x = torch.empty(shape, device="meta", dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    c = shape[1]
    w, b, rm, rv = (torch.empty(c, device="meta") for _ in range(4))

    def sig(outs):
        return [None if o is None else (tuple(o.shape), o.dtype, o.stride(), o.device.type) for o in outs]

    fwd_args = (x, w, b, rm, rv, training, 0.1, 1e-5)
    want = aten.native_batch_norm.default(*fwd_args)
    assert sig(_meta_shortcut("native_batch_norm", fwd_args)) == sig(want)
    g = torch.empty_like(want[0])
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        bwd_args = (g, x, w, rm, rv, want[1], want[2], training, 1e-5, mask)
        assert sig(_meta_shortcut("native_batch_norm_backward", bwd_args)) == sig(aten.native_batch_norm_backward.default(*bwd_args))


def test_batch_norm_without_affine_weights_runs_the_meta_kernel():
    x = torch.empty(4, 6, 5, 5, device="meta")
    assert _meta_shortcut("native_batch_norm", (x, None, None, None, None, True, 0.1, 1e-5)) is None


def test_a_meta_trace_neither_imports_dynamo_nor_changes_its_ops():
    """In a fresh process: building and tracing zoo models (batch norm, embeddings, LSTM, SDPA, autocast) leaves
    ``torch._dynamo`` unimported, and the ops equal those of a trace made with the real ``torch._dynamo`` loaded."""
    code = """
import sys, json
from prenet.user_models import build_model
from prenet.ops import trace_step
def ops():
    out = []
    for name, prec, dev in [("resnet18", "fp16", "cuda"), ("lstm_lm", "bf16", "cpu"), ("gpt_sdpa", "fp32", "cuda"), ("mobilenet_v2_like", "fp32", "cpu")]:
        m, b = build_model(name, 2)
        out += [(r.op, r.shapes, r.dtype, r.flops, r.bytes) for r in trace_step(m, b, optimizer="adam", precision=prec, device_type=dev).records]
    return out
first = ops()
clean = "torch._dynamo" not in sys.modules
import torch._dynamo
print(json.dumps({"clean": clean, "same": ops() == first, "n": len(first)}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    res = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    assert res["clean"], "a meta trace imported torch._dynamo"
    assert res["same"] and res["n"] > 100
