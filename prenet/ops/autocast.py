"""Mixed precision on the ``meta`` device: torch's autocast op lists, applied by a ``TorchFunctionMode``.

``torch.autocast`` only acts on tensors of a real device (CPU, CUDA): a meta trace under it stays FP32, and a CPU
build of torch cannot make CUDA fake tensors. This mode does what autocast does, above autograd, so the casts
are part of the autograd graph and backward runs in the dtypes autocast would give it:

* ops of the **lower-precision list** (GEMMs, convolutions, attention, RNN cells) cast floating inputs to the
  low dtype (a leaf weight is cast once per step, as autocast's weight cache does);
* ops of the **FP32 list** (CUDA: softmax, layer/group norm, losses, exp/log/pow, sums; CPU: losses and a few
  others) cast low-precision inputs to FP32;
* ops of the **promote list** run in the widest floating dtype of their inputs; everything else runs in the
  dtype it is given.

The lists are torch's (``aten/src/ATen/autocast_mode.cpp``, torch 2.x) for the ``cuda`` and ``cpu`` device types, plus the
Python entry points that reach them under another name (``F.cross_entropy`` → ``cross_entropy_loss``);
``tests/test_ops.py`` checks the CPU emulation against real ``torch.autocast("cpu")`` op by op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

LOWER_PRECISION: dict[str, frozenset[str]] = {
    "cuda": frozenset(
        {
            "_convolution",
            "conv1d",
            "conv2d",
            "conv3d",
            "conv_tbc",
            "conv_transpose1d",
            "conv_transpose2d",
            "conv_transpose3d",
            "convolution",
            "prelu",
            "addmm",
            "addmv",
            "addr",
            "matmul",
            "einsum",
            "mm",
            "mv",
            "linalg_vecdot",
            "linear",
            "addbmm",
            "baddbmm",
            "bmm",
            "chain_matmul",
            "linalg_multi_dot",
            "_thnn_fused_lstm_cell",
            "_thnn_fused_gru_cell",
            "lstm_cell",
            "gru_cell",
            "rnn_tanh_cell",
            "rnn_relu_cell",
            "_scaled_dot_product_flash_attention",
            "scaled_dot_product_attention",
            "__matmul__",
            "__rmatmul__",
            "lstm",
            "gru",
            "rnn_tanh",
            "rnn_relu",
        }
    ),
    "cpu": frozenset(
        {
            "conv1d",
            "conv2d",
            "conv3d",
            "bmm",
            "mm",
            "linalg_vecdot",
            "baddbmm",
            "addmm",
            "addbmm",
            "linear",
            "_convolution",
            "matmul",
            "conv_tbc",
            "mkldnn_rnn",
            # the fused LSTM layer a CPU runs (torch's lstm calls it per layer and direction): under real CPU autocast its
            # inputs are cast and it runs in BF16 (dispatch-mode check, torch 2.13); listed as "mkldnn_rnn" only, the
            # emulation left it FP32 and an LSTM tagger's BF16 step was answered as its FP32 one (48 ms against 30).
            # The trace runs the layer inside its own mode (prenet.ops.trace.mkldnn_lstm), which this one does not see,
            # so the lstm call's arguments are cast here, as the layer's would be
            "mkldnn_rnn_layer",
            "lstm",
            "conv_transpose1d",
            "conv_transpose2d",
            "conv_transpose3d",
            "prelu",
            "scaled_dot_product_attention",
            "_native_multi_head_attention",
            "__matmul__",
            "__rmatmul__",
        }
    ),
}
FP32: dict[str, frozenset[str]] = {
    "cuda": frozenset(
        {
            "acos",
            "asin",
            "cosh",
            "erfinv",
            "exp",
            "expm1",
            "log",
            "log10",
            "log2",
            "log1p",
            "reciprocal",
            "rsqrt",
            "sinh",
            "tan",
            "pow",
            "softplus",
            "layer_norm",
            "native_layer_norm",
            "group_norm",
            "frobenius_norm",
            "nuclear_norm",
            "cosine_similarity",
            "poisson_nll_loss",
            "cosine_embedding_loss",
            "nll_loss",
            "nll_loss2d",
            "hinge_embedding_loss",
            "kl_div",
            "l1_loss",
            "smooth_l1_loss",
            "huber_loss",
            "mse_loss",
            "margin_ranking_loss",
            "multilabel_margin_loss",
            "soft_margin_loss",
            "triplet_margin_loss",
            "multi_margin_loss",
            "binary_cross_entropy_with_logits",
            "dist",
            "pdist",
            "cdist",
            "renorm",
            "logsumexp",
            "prod",
            "softmax",
            "log_softmax",
            "cumprod",
            "cumsum",
            "linalg_vector_norm",
            "sum",
            "norm",
            "cross_entropy_loss",
            "cross_entropy",
            "upsample_nearest1d",
            "upsample_nearest2d",
            "upsample_bilinear2d",
            "rms_norm",
        }
    ),
    "cpu": frozenset(
        {
            "avg_pool3d",
            "binary_cross_entropy",
            "grid_sampler",
            "polar",
            "prod",
            "quantile",
            "nanquantile",
            "stft",
            "cdist",
            "trace",
            "view_as_complex",
            "cholesky",
            "cholesky_inverse",
            "cholesky_solve",
            "inverse",
            "lu_solve",
            "orgqr",
            "ormqr",
            "pinverse",
            "max_pool3d",
            "max_unpool2d",
            "max_unpool3d",
            "adaptive_avg_pool3d",
            "reflection_pad1d",
            "reflection_pad2d",
            "replication_pad1d",
            "replication_pad2d",
            "replication_pad3d",
            "mse_loss",
            "cosine_embedding_loss",
            "nll_loss",
            "nll_loss2d",
            "hinge_embedding_loss",
            "poisson_nll_loss",
            "smooth_l1_loss",
            "cross_entropy_loss",
            "l1_loss",
            "huber_loss",
            "margin_ranking_loss",
            "soft_margin_loss",
            "triplet_margin_loss",
            "multi_margin_loss",
            "ctc_loss",
            "kl_div",
            "multilabel_margin_loss",
            "binary_cross_entropy_with_logits",
            "cross_entropy",
        }
    ),
}
PROMOTE = frozenset(
    {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "scatter_add", "tensordot", "cat", "stack"}
)


def _name(func: Any) -> str:
    return getattr(func, "__name__", "")


class Autocast(TorchFunctionMode):
    """Autocast ``dtype`` (``torch.float16`` / ``torch.bfloat16``) with the op lists of ``device_type``
    (``cuda`` or ``cpu``). Use it around the forward pass and the loss, as ``torch.autocast``."""

    def __init__(self, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.low = LOWER_PRECISION[device_type]
        self.fp32 = FP32[device_type]
        self.dtype = dtype
        self._cache: dict[int, torch.Tensor] = {}

    def _cast(self, obj: Any, to: torch.dtype) -> Any:
        if isinstance(obj, torch.Tensor):
            if not obj.is_floating_point() or obj.dtype == to or obj.dtype == torch.float64:
                return obj
            if obj.is_leaf and obj.requires_grad:  # autocast caches the cast of a weight for the whole region
                key = id(obj)
                if key not in self._cache:
                    self._cache[key] = obj.to(to)
                return self._cache[key]
            return obj.to(to)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._cast(o, to) for o in obj)
        return obj

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name in self.low:
            args, kwargs = self._cast(args, self.dtype), {k: self._cast(v, self.dtype) for k, v in kwargs.items()}
        elif name in self.fp32:
            args, kwargs = self._cast(args, torch.float32), {k: self._cast(v, torch.float32) for k, v in kwargs.items()}
        elif name in PROMOTE:
            floats = [t.dtype for t in _flat(args) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            if floats and len(set(floats)) > 1:
                wide = torch.float32 if torch.float32 in floats else floats[0]
                args = self._cast(args, wide)
        return func(*args, **kwargs)


def _flat(obj: Any) -> list:
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _flat(o)]
    return [obj]
