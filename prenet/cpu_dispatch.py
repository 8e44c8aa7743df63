"""Which kernel torch runs for an op on a CPU, where the choice changes the op's time: the rules as torch states them,
so that a trace on the meta device records the kernel a real CPU runs, and the CPU op benchmark's rows are taken for
what they measured."""

from __future__ import annotations


def native_conv(batch: int, input_numel: int, kernel: tuple[int, int], *, strided: bool, dilated: bool, groups: int, threads: int) -> bool:
    """Whether torch runs an FP32 CPU 2-D convolution natively (THNN's ``_slow_conv2d``: a GEMM per sample) instead of
    with oneDNN, by ``ConvParams::use_mkldnn`` (aten/src/ATen/native/Convolution.cpp). oneDNN needs (a) a strided or
    dilated convolution, a ``batch`` of 16 or more, a kernel other than 1×1, or more than one thread ("THNN is faster
    when single-threaded" for 1×1 filters), and (b) groups, a kernel over 3×3, a batch over 1, or an input of more than
    20,480 elements. Grouped convolutions are counted as oneDNN's here (the native path would loop over the groups)."""
    if groups != 1:
        return False
    kh, kw = kernel
    onednn_a = strided or dilated or batch >= 16 or (kh, kw) != (1, 1) or threads > 1
    onednn_b = (kh > 3 and kw > 3) or batch > 1 or input_numel > 20480
    return not (onednn_a and onednn_b)


def brgemm_depthwise_backward(dtype: str, *, depthwise: bool, strided: bool, input_grad: bool) -> bool:
    """Whether a CPU depthwise convolution's backward runs its input gradient as oneDNN's ``brgconv_strided`` (a
    batch-reduce GEMM of one channel per group) rather than its depthwise JIT kernel (``jit_dw``): for ``bfloat16``
    operands at a stride over 1. oneDNN as torch 2.13 ships it takes ``jit_dw`` for the weight gradient, for stride 1 and
    for FP32 (``ONEDNN_VERBOSE=1`` on an AMD EPYC with AVX512-BF16, 2026-12-07: 16×96×32² → 16², 3×3, one thread,
    the input gradient 22.7 ms by ``brgconv_strided:avx512_core_bf16`` against 2.2 ms by ``jit_dw`` at stride 1 and 3.2
    ms in FP32; its time follows the rows it walks, ~0.45 µs per sample, channel and input row, not its FLOPs)."""
    return dtype == "bfloat16" and depthwise and strided and input_grad
