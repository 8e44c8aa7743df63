"""Operator families: which family an ATen op belongs to, and the rules for its FLOPs and the bytes it moves (applied
to a call's tensors by :mod:`prenet.ops.accounting`; this module imports no torch, so a prediction from a stored
trace needs none).

One rule per quantity, used by the tracer (:mod:`prenet.ops.trace`), the op benchmark and the external
timings alike:

* **FLOPs** — GEMM, convolution (forward and backward) and attention from their shapes (multiply-add = 2
  FLOPs); every other op one FLOP per output element (memory-bound ops: the FLOPs never decide their roofline).
* **Bytes** — every distinct tensor read plus every tensor written, once (an in-place op reads and writes its
  first argument: it counts twice). Caches are not modelled here; the learned efficiency absorbs them.
* **GEMM view** — ``m, n, k, batch`` of the matrix product an op performs (a convolution as its implicit GEMM:
  m = N·H_out·W_out, n = C_out / groups, k = C_in / groups · kernel volume), the input of the tile/wave features.
"""

from __future__ import annotations

from typing import Any

#: Families whose ops run on tensor cores in fp16 / bf16 (everything else uses the FP32 units) ...
TENSOR_CORE_FAMILIES = frozenset({"gemm", "conv", "conv_grouped", "attention", "rnn"})
#: ... and the ones TF32 applies to (cuBLAS GEMMs and cuDNN convolutions/RNNs; attention kernels stay FP32).
TF32_FAMILIES = frozenset({"gemm", "conv", "conv_grouped", "rnn"})
#: The tensor-core units: a convolution on them runs cuDNN's NHWC kernels. TF32 is one of them: on Ampere and later an
#: FP32 convolution of NCHW tensors runs TF32 NHWC kernels (``..._tf32f32_tf32f32_f32_nhwckrsc_...``,
#: ``cutlass_tensorop_s1688fprop_optimized_tf32_..._nhwc``) between ``nchwToNhwcKernel<float>`` / ``nhwcToNchwKernel``
#: calls, as FP16 ones do (profiles of torch's default FP32 ResNets, where the transposes are ~10 % of CUDA time)
TENSOR_CORE_UNITS = frozenset({"fp16", "bf16", "tf32"})
#: The families cuDNN runs (convolutions, grouped ones included, and the fused RNNs), whose FP32 math torch puts on TF32
#: tensor cores by default where the GPU has them: ``torch.backends.cudnn.allow_tf32`` is True
#: (``torch.backends.cudnn.conv.fp32_precision`` and ``.rnn.fp32_precision`` are ``"tf32"``), while cuBLAS GEMMs stay
#: IEEE FP32 (``torch.backends.cuda.matmul.allow_tf32`` is False since torch 1.12). An ``fp32`` step on a GPU is
#: predicted so (:meth:`prenet.ops.records.StepTrace.frame_for`); ``tf32`` puts the GEMMs on TF32 too. An LSTM or GRU
#: traced for a GPU is its GEMMs and gate ops (cuDNN's fused RNN is not traced), so under ``fp32`` its GEMMs stay on the
#: FP32 units where torch's cuDNN RNN would use TF32: ``rnn`` here covers measured traces only.
CUDNN_TF32_FAMILIES = frozenset({"conv", "conv_grouped", "rnn"})
#: cuDNN's layout transposes around a tensor-core convolution of NCHW tensors, as a CUDA trace records them: each 4-D
#: operand into NHWC, each 4-D result back (copy ops)
LAYOUT_TRANSPOSES = ("nchwToNhwc", "nhwcToNchw")

_GEMM = {"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "addbmm", "addmv", "mv", "dot", "_int_mm", "_grouped_mm"}
_CONV = {
    "convolution",
    "_convolution",
    "convolution_backward",
    "_slow_conv2d_forward",
    "_slow_conv2d_backward",
    "mkldnn_convolution",
    "cudnn_convolution",
    "thnn_conv2d",
    "_conv_depthwise2d",
    "slow_conv3d_forward",
    "slow_conv_dilated2d",
    "slow_conv_transpose2d",
}
ATTENTION_PREFIX = ("_scaled_dot_product", "_flash_attention", "_efficient_attention", "scaled_dot_product")
_NORM = {
    "native_batch_norm",
    "native_batch_norm_backward",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training",
    "native_layer_norm",
    "native_layer_norm_backward",
    "native_group_norm",
    "native_group_norm_backward",
    "batch_norm_backward",
    "_batch_norm_with_update",
    "_batch_norm_no_update",
    "cudnn_batch_norm",
    "cudnn_batch_norm_backward",
    "miopen_batch_norm",
    "_fused_rms_norm",
    "_fused_rms_norm_backward",
    "batch_norm_stats",
    "batch_norm_elemt",
    "batch_norm_gather_stats",
}
_SOFTMAX = {"_softmax", "_safe_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "softmax", "log_softmax"}
_REDUCTION = {
    "adaptive_avg_pool2d",
    # a mixture-of-experts router's: the top-k experts of each token, their order and per-expert counts
    "topk",
    "sort",
    "histc",
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
    "prod",
    "norm",
    "linalg_vector_norm",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "logsumexp",
    "cumsum",
    "all",
    "any",
    "_foreach_norm",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward",
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    "max_pool1d",
    "max_pool1d_with_indices",
    "avg_pool1d",
    "max_pool3d_with_indices",
    "avg_pool3d",
    "_adaptive_avg_pool3d",
}
_EMBEDDING = {
    "embedding",
    "embedding_dense_backward",
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "index_add",
    "index_put",
    "index_put_",
    "_index_put_impl",
    "_index_put_impl_",
    "index_add_",
    "index",
    "take",
    "embedding_renorm_",
    "_embedding_bag",
    "scatter_reduce",
    "masked_scatter",
    "index_copy",
    "_unsafe_index",
    "_unsafe_index_put",
}
_COPY = {
    "clone",
    "_to_copy",
    "copy",
    "copy_",
    "contiguous",
    "cat",
    "stack",
    "constant_pad_nd",
    "repeat",
    "flip",
    "roll",
    "pixel_shuffle",
    "pixel_unshuffle",
    "arange",
    "linspace",
    "scalar_tensor",
    "fill",
    "fill_",
    "zero",
    "zero_",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "new_zeros",
    "new_ones",
    "new_full",
    "masked_fill",
    "where",
    "tril",
    "triu",
    "_reshape_copy",
    "narrow_copy",
    "split_with_sizes_copy",
    "reflection_pad2d",
    "replication_pad2d",
    "upsample_nearest2d",
    "upsample_bilinear2d",
    "upsample_nearest2d_backward",
    "upsample_bilinear2d_backward",
    "col2im",
    "im2col",
    "lift_fresh_copy",
    "select_backward",
    "slice_backward",
    "select_scatter",
    "slice_scatter",
    "as_strided_scatter",
    "diagonal_backward",
    "unfold_backward",
    "permute_copy",
    "transpose_copy",
    "expand_copy",
    "view_copy",
}
_LOSS = {
    "nll_loss_forward",
    "nll_loss_backward",
    "nll_loss2d_forward",
    "nll_loss2d_backward",
    "mse_loss",
    "mse_loss_backward",
    "binary_cross_entropy",
    "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits",
    "l1_loss",
    "smooth_l1_loss",
    "smooth_l1_loss_backward",
    "huber_loss",
    "huber_loss_backward",
    "kl_div",
    "cross_entropy_loss",
}
_RNN_OPS = {
    "_thnn_fused_lstm_cell",
    "_thnn_fused_lstm_cell_backward_impl",
    "_thnn_fused_gru_cell",
    "_thnn_fused_gru_cell_backward",
    "lstm",
    "gru",
    "rnn_tanh",
    "rnn_relu",
    "_cudnn_rnn",
    "_cudnn_rnn_backward",
    "mkldnn_rnn_layer",
    "mkldnn_rnn_layer_backward",
}
#: Ops that allocate or alias and move no data: not timed, not listed.
FREE = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "detach",
    "alias",
    "lift_fresh",
    "_local_scalar_dense",
    "resize_",
    "set_",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "_to_dense",
    # views in effect (a GRU's gate chunks, matmul's folded outputs, reshape after its clone): torch marks them unsafe,
    # not views, but they move no data (ATen's _unsafe_view is self.view(size): an alias, no kernel)
    "_unsafe_view",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "unsafe_chunk",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "record_stream",
    "_version",
    "equal",
    "size",
    "stride",
    "numel",
    "dim",
    "is_nonzero",
    "item",
    # in-place metadata changes (they move no data, and repeating one while timing would undo it)
    "t_",
    "transpose_",
    "squeeze_",
    "unsqueeze_",
    "as_strided_",
    "resize_as_",
    "swapaxes_",
    "swapdims_",
    "detach_",
}

#: A grouped convolution on tensor cores (fp16, bf16, tf32), answered as its own pseudo-family: its per-group GEMMs are
#: narrow (ResNeXt-32x4d: 4-32 channels a group, k = 36-288), so its arithmetic intensity (~20 FLOPs per byte) sits far
#: below a tensor core's ridge (~150 on an A100) and it runs at memory speed, which the elementwise model knows. The conv
#: model's tensor-core rows (DeepBench's dense convolutions) hold no such narrow shape: answered by it, ResNeXt101's
#: grouped convolutions took 8-15 % of their roofline and the AMP steps came out 23-29 % too slow (2026-12-05). On the
#: FP32 units (compute-bound there) grouped convolutions keep the conv analogy, whose FP32 rows include narrow convs.
TENSOR_GROUPED_CONV = "conv_grouped_tensor"

#: An FP32 CPU convolution that torch runs natively, not with oneDNN (THNN's ``_slow_conv2d``: per sample, the weight
#: times the sample's columns, one GEMM each; :func:`prenet.cpu_dispatch.native_conv` says when): its own family, since
#: its time follows those per-sample GEMMs (inner dimension H·W, which is 4-225 in a ResNet-50 at 64 px), not oneDNN's
#: blocked kernels. Its ops keep the convolution's name and FLOPs; their GEMM view is the per-sample product
#: (batch N, m C_out, n H_out·W_out, k C_in·kh·kw). With too few rows it is answered as the GEMMs it runs.
NATIVE_CONV = "conv_native"

#: A BF16 depthwise convolution's strided backward on a CPU, whose input gradient oneDNN runs as a batch-reduce GEMM of
#: one channel per group (:func:`prenet.cpu_dispatch.brgemm_depthwise_backward` says when): its own family, since it
#: runs 5-20x its stride-1 or FP32 time and the depthwise family's features (no stride among them) cannot tell the two
#: apart. In one family with them, MobileNetV2-like's three stride-2 depthwise backwards (BF16, batch 16, 64 px) were
#: answered 15.5 / 6.6 / 2.4 ms against 23.7 / 15.4 / 9.7 timed in place, and its stride-1 ones 1.3-2x too slow
#: (2026-12-07). With too few rows it is answered as a depthwise convolution.
DEPTHWISE_BRGEMM = "conv_depthwise_brgemm"

#: Families that a trained efficiency model answers by analogy when its own family has no data on a device kind:
#: the analogy is named in every answer (``estimate`` column).
ANALOGY: dict[str, str] = {
    "conv_grouped": "conv",
    NATIVE_CONV: "gemm",
    TENSOR_GROUPED_CONV: "elementwise",
    "conv_depthwise": "elementwise",
    DEPTHWISE_BRGEMM: "conv_depthwise",
    "attention": "gemm",
    "norm": "softmax",
    "reduction": "elementwise",
    "embedding": "elementwise",
    "copy": "elementwise",
    "loss": "softmax",
    "optimizer": "elementwise",
    "rnn": "gemm",
    "softmax": "elementwise",
}  # "other" has no analogy: an op of no family is estimated by its roofline alone


def base_name(func: Any) -> str:
    """``aten.addmm.default`` → ``addmm``."""
    name = getattr(func, "__name__", str(func))
    packet = getattr(func, "_overloadpacket", None)
    if packet is not None:
        name = packet.__name__
    return name.split(".")[0]


#: Elementwise ops torch does not tag ``pointwise`` (random fills, comparisons' outputs, dropout).
_ELEMENTWISE_EXTRA = {
    "native_dropout",
    "native_dropout_backward",
    "bernoulli",
    "bernoulli_",
    "uniform_",
    "normal_",
    "rand_like",
    "randn_like",
    "where",
    "masked_fill_",
    "clamp_min_",
    "clamp_max_",
    "sign",
    "lerp_",
    "threshold",
    "hardtanh_backward",
    "silu_backward",
    "gelu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "elu_backward",
    "leaky_relu_backward",
    "softplus_backward",
    "hardswish_backward",
    "hardsigmoid_backward",
    "mish_backward",
    # activations torch's ATen does not tag ``pointwise`` either: as "other" they were answered by the roofline ÷ the
    # CPU's median efficiency, 16× their measured time (MobileNetV3-Small's 19 ``hardswish_`` calls: 4.6 ms predicted,
    # 0.29 ms measured, 2026-12-05)
    "hardswish",
    "hardswish_",
    "mish",
    "mish_",
    "threshold_",
    "rrelu_with_noise",
    "rrelu_with_noise_",
    "rrelu_with_noise_backward",
    "log_sigmoid_forward",
    "log_sigmoid_backward",
    "glu",
    "glu_backward",
    "_prelu_kernel",
    "_prelu_kernel_backward",
    "softshrink_backward",
    "hardshrink_backward",
    "_masked_scale",
    "rand",
    "randn",
    "floor_divide",
}


#: Work per element of an elementwise op beyond moving it (the ``op_class`` feature of the efficiency model): 0 = a
#: load/add/compare/select, 1 = a division or square root, 2 = a transcendental (exp, log, tanh, erf: sigmoid, GELU,
#: SiLU and their backwards), 3 = a random draw (dropout masks: a counter-based RNG per element). The classes
#: order the arithmetic cost per element; ops not listed are 0.
_OP_CLASS: dict[str, int] = {
    **dict.fromkeys(
        (
            "div",
            "div_",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "addcdiv",
            "addcdiv_",
            "_foreach_div",
            "_foreach_sqrt",
            "_foreach_addcdiv_",
            "_foreach_div_",
            "_foreach_sqrt_",
            "remainder",
            "fmod",
            "floor_divide",
        ),
        1,
    ),
    **dict.fromkeys(
        (
            "exp",
            "exp_",
            "log",
            "log1p",
            "expm1",
            "tanh",
            "tanh_backward",
            "sigmoid",
            "sigmoid_backward",
            "gelu",
            "gelu_backward",
            "silu",
            "silu_backward",
            "erf",
            "erfinv",
            "pow",
            "pow_",
            "sin",
            "cos",
            "softplus",
            "softplus_backward",
            "mish",
            "mish_backward",
            "elu",
            "elu_backward",
            "log_sigmoid_forward",
            "log_sigmoid_backward",
            "mish_",
            "glu",
            "glu_backward",
            "_foreach_pow",
            "_foreach_exp",
        ),
        2,
    ),
    **dict.fromkeys(
        (
            "bernoulli",
            "bernoulli_",
            "native_dropout",
            "uniform_",
            "normal_",
            "rand_like",
            "randn_like",
            "randint_like",
            "exponential_",
            "multinomial",
            "rrelu_with_noise",
            "rrelu_with_noise_",
            "rand",
            "randn",
        ),
        3,
    ),
}


def _dims(shapes: str | None) -> list[list[int]]:
    return [[int(v) for v in p.strip().split("x")] for p in (shapes or "").split(",") if "x" in p]


def winograd_3x3(name: str, shapes: str, out_shapes: str | None, groups: int) -> bool:
    """Whether a convolution (forward or backward, as recorded: ``shapes`` ``"NxCxHxW, OxCx3x3"``) is a dense 3×3,
    stride-1 convolution that keeps its spatial size — the case cuDNN runs with Winograd's algorithm, which needs
    2.25× fewer multiplies (F(2×2, 3×3)) than the direct FLOPs counted here."""
    if groups > 1 or "dilated" in name or not (name.startswith("conv") or name in _CONV):
        return False
    four = [d for d in _dims(shapes) if len(d) == 4]  # forward: x, weight; backward: grad_out, x, weight
    if len(four) < 2 or four[-1][2:] != [3, 3]:
        return False
    acts = four[:-1]
    if len(acts) == 1:  # forward: compare the input with the output
        outs = [d for d in _dims(out_shapes) if len(d) == 4]
        acts = acts + outs[:1]
    return len(acts) >= 2 and acts[0][2:] == acts[1][2:]


def op_class(name: str) -> int:
    """The per-element work class of ATen op ``name`` (:data:`_OP_CLASS`, in-place variants ``op_`` as ``op``; 0 when not
    listed)."""
    return _OP_CLASS.get(name, _OP_CLASS.get(name.rstrip("_"), 0))


def family_of(name: str, *, phase: str, groups: int = 1, channels: int = 0, pointwise: bool = True) -> str:
    """The family of ATen op ``name`` executed in ``phase`` (forward | backward | optimizer); ``groups``/``channels``: a
    convolution's groups and input channels; ``pointwise``: torch tags the op ``pointwise``. An op of no family is
    ``other``: estimated by its roofline alone (and said so).

    Only the fused recurrent kernels are ``rnn`` (oneDNN's LSTM layer, cuDNN's RNN, the fused cells). Inside a recurrent
    module that runs step by step (a GRU on a CPU), each timestep's GEMM and gate activations run as the same kernels as
    anywhere else, so they are ``gemm`` and ``elementwise`` at their real shapes (as one family before 2026-12-02, the
    GRU tagger's per-step GEMMs were predicted with the fused-layer model, ~1.3 ms each)."""
    if (
        phase == "optimizer"
        or name.startswith("_foreach")
        or name.startswith("_fused_adam")
        or name.startswith("_fused_sgd")
        or name.startswith("_amp_")
    ):
        return "optimizer"
    if name in _RNN_OPS:
        return "rnn"
    if name in _CONV or name.startswith("conv"):
        if groups > 1:
            return "conv_depthwise" if groups == channels else "conv_grouped"
        return "conv"
    if name.startswith(ATTENTION_PREFIX):
        return "attention"
    if name in _GEMM:
        return "gemm"
    if name in _NORM:
        return "norm"
    if name in _SOFTMAX:
        return "softmax"
    if name in _LOSS:
        return "loss"
    if name in _REDUCTION:
        return "reduction"
    if name in _EMBEDDING:
        return "embedding"
    if name in _COPY:
        return "copy"
    if pointwise or name in _ELEMENTWISE_EXTRA:
        return "elementwise"
    return "other"


def unit_of(family: str, dtype: str, precision: str, cudnn_tf32: bool = False) -> str:
    """The arithmetic unit of an op: tensor-core families in 16-bit dtypes use fp16/bf16 units, in FP32 under ``tf32``
    the TF32 units, and under ``fp32`` with ``cudnn_tf32`` (a GPU with TF32 units, torch's defaults) the cuDNN ones
    (:data:`~prenet.ops.families.CUDNN_TF32_FAMILIES`) too; every other op runs on the FP32 units."""
    if family in TENSOR_CORE_FAMILIES:
        if dtype == "float16":
            return "fp16"
        if dtype == "bfloat16":
            return "bf16"
        if precision == "tf32" and dtype == "float32" and family in TF32_FAMILIES:
            return "tf32"
        if cudnn_tf32 and precision == "fp32" and dtype == "float32" and family in CUDNN_TF32_FAMILIES:
            return "tf32"
    return "fp32"
