"""Walk an ``nn.Module`` on the ``meta`` device (shapes only, no weight memory) into the layer calls the
registry knows.

Leaf modules are recognised by type (:data:`MODULE_MAPPERS`); tensor additions, activations and softmax
called functionally in a ``forward`` (a ResNet's residual ``out += identity``, a transformer's ``x + attn``)
are caught with a ``TorchFunctionMode`` while no leaf module is running. A leaf with parameters that no
mapper knows is an error naming its type; a parameter-free one (``Flatten``, ``Identity``) costs nothing.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from prenet.errors import PrenetError
from prenet.layers import REGISTRY


@dataclass(frozen=True)
class LayerCall:
    """One layer invocation in a model's forward pass."""

    name: str
    op: str
    shape: dict[str, int] = field(hash=False)

    @property
    def trainable(self) -> bool:
        return REGISTRY[self.op].trainable


def _rows(t: torch.Tensor) -> dict[str, int]:
    """Any tensor as [batch, hidden]: batch = first dim, hidden = the rest."""
    if t.dim() == 0:
        return {"batch": 1, "hidden": 1}
    b = int(t.shape[0])
    return {"batch": max(b, 1), "hidden": max(int(t.numel() // max(b, 1)), 1)}


def _square(h: int, w: int) -> int:
    return h if h == w else int(round(math.sqrt(h * w)))


def _pair(v: Any) -> int:
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)


def _linear(m: nn.Linear, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    return [("linear", {"batch": int(x.numel() // x.shape[-1]), "in_features": m.in_features, "out_features": m.out_features})]


def _conv2d(m: nn.Conv2d, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    if m.groups != 1:
        raise PrenetError(f"grouped/depthwise Conv2d (groups={m.groups}) is not in the layer registry yet")
    pad = m.padding if isinstance(m.padding, (tuple, list)) else (m.kernel_size[0] // 2 if m.padding == "same" else 0,)
    return [
        (
            "conv2d",
            {
                "batch": int(x.shape[0]),
                "in_channels": m.in_channels,
                "out_channels": m.out_channels,
                "kernel_size": _pair(m.kernel_size),
                "input_size": _square(int(x.shape[-2]), int(x.shape[-1])),
                "stride": _pair(m.stride),
                "padding": _pair(pad),
            },
        )
    ]


def _recurrent(m: nn.RNNBase, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    b, t = (int(x.shape[0]), int(x.shape[1])) if m.batch_first else (int(x.shape[1]), int(x.shape[0]))
    kind = {"RNN_TANH": "rnn", "RNN_RELU": "rnn", "LSTM": "lstm", "GRU": "gru"}[m.mode]
    dirs = 2 if m.bidirectional else 1
    calls = []
    for layer in range(m.num_layers):
        inp = m.input_size if layer == 0 else m.hidden_size * dirs
        calls += [(kind, {"batch": b, "seq_len": t, "in_features": inp, "hidden_size": m.hidden_size})] * dirs
    return calls


def _mha(m: nn.MultiheadAttention, args, out) -> list[tuple[str, dict]]:
    q = args[0]
    b, t = (int(q.shape[0]), int(q.shape[1])) if m.batch_first else (int(q.shape[1]), int(q.shape[0]))
    return [("mha", {"batch": b, "seq_len": t, "embed_dim": m.embed_dim, "num_heads": m.num_heads})]


def _embedding(m: nn.Embedding, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    b, t = (int(x.shape[0]), int(x.numel() // max(int(x.shape[0]), 1))) if x.dim() >= 1 else (1, 1)
    return [("embedding", {"batch": b, "seq_len": t, "num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim})]


def _layernorm(m: nn.LayerNorm, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    h = int(math.prod(m.normalized_shape))
    return [("layernorm", {"batch": int(x.numel() // h), "hidden": h})]


def _batchnorm(m: nn.BatchNorm2d, args, out) -> list[tuple[str, dict]]:
    x = args[0]
    return [("batchnorm2d", {"batch": int(x.shape[0]), "channels": int(x.shape[1]), "input_size": _square(int(x.shape[-2]), int(x.shape[-1]))})]


def _pool(op: str) -> Callable:
    def mapper(m, args, out) -> list[tuple[str, dict]]:
        x = args[0]
        h = _square(int(x.shape[-2]), int(x.shape[-1]))
        if isinstance(m, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
            o = _pair(m.output_size) if m.output_size is not None else h
            k = max(h // max(o, 1), 1)
            stride = k
        else:
            k = _pair(m.kernel_size)
            stride = _pair(m.stride) if m.stride is not None else k
        return [(op, {"batch": int(x.shape[0]), "channels": int(x.shape[1]), "input_size": max(h, k), "kernel_size": k, "stride": stride})]

    return mapper


def _rowwise(op: str) -> Callable:
    return lambda m, args, out: [(op, _rows(args[0]))]


MODULE_MAPPERS: dict[type, Callable] = {
    nn.Linear: _linear,
    nn.Conv2d: _conv2d,
    nn.RNN: _recurrent,
    nn.LSTM: _recurrent,
    nn.GRU: _recurrent,
    nn.MultiheadAttention: _mha,
    nn.Embedding: _embedding,
    nn.LayerNorm: _layernorm,
    nn.BatchNorm2d: _batchnorm,
    nn.MaxPool2d: _pool("maxpool2d"),
    nn.AvgPool2d: _pool("avgpool2d"),
    nn.AdaptiveAvgPool2d: _pool("avgpool2d"),
    nn.AdaptiveMaxPool2d: _pool("maxpool2d"),
    nn.ReLU: _rowwise("relu"),
    nn.GELU: _rowwise("gelu"),
    nn.Tanh: _rowwise("tanh"),
    nn.Sigmoid: _rowwise("sigmoid"),
    nn.Dropout: _rowwise("dropout"),
    nn.Softmax: _rowwise("softmax"),
}
#: Functional calls made outside any leaf module that are layers of their own.
FUNCTIONAL: dict[Any, str] = {
    F.relu: "relu",
    torch.relu: "relu",
    F.gelu: "gelu",
    torch.tanh: "tanh",
    torch.sigmoid: "sigmoid",
    F.dropout: "dropout",
    torch.softmax: "softmax",
    F.softmax: "softmax",
    torch.Tensor.softmax: "softmax",
    torch.Tensor.relu: "relu",
}
ADDS = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.__iadd__, torch.Tensor.add_}


class _Functional(TorchFunctionMode):
    def __init__(self, walker: "_Walker"):
        super().__init__()
        self.walker = walker

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.walker.depth == 0 and isinstance(out, torch.Tensor) and out.numel() > 1:
            if func in ADDS and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
                self.walker.record("add", _rows(out))
            elif func in FUNCTIONAL:
                self.walker.record(FUNCTIONAL[func], _rows(args[0]))
        return out


class _Walker:
    def __init__(self) -> None:
        self.calls: list[LayerCall] = []
        self.depth = 0
        self.counter: dict[str, int] = {}

    def record(self, op: str, shape: dict[str, int], name: str | None = None) -> None:
        """``name``: the module path; functional calls are numbered per op (``add#0``, ``add#1``, ...)."""
        if name is None:
            i = self.counter.get(op, 0)
            self.counter[op] = i + 1
            name = f"{op}#{i}"
        self.calls.append(LayerCall(name, op, REGISTRY[op].complete(shape)))


def mapper_for(m: nn.Module) -> Callable | None:
    """The mapper of the nearest registered class in ``m``'s MRO (subclasses of ``nn.Linear`` map as linear)."""
    for cls in type(m).__mro__:
        if cls in MODULE_MAPPERS:
            return MODULE_MAPPERS[cls]
    return None


def walk(module: nn.Module, *inputs: torch.Tensor) -> list[LayerCall]:
    """The layer calls of ``module(*inputs)``, in execution order. ``module`` is copied to the meta device
    (its weights are not touched) and run on meta tensors of the inputs' shapes."""
    return trace(module, *inputs)[0]


def trace(module: nn.Module, *inputs: torch.Tensor) -> tuple[list[LayerCall], Any]:
    """Like :func:`walk`, also returning the (meta) output of the forward pass."""
    meta = module if _on_meta(module) else copy.deepcopy(module).to("meta")
    meta.eval()  # batch norm and dropout as in the paper's convention: shapes are identical in train mode
    meta_inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
    w = _Walker()
    handles = []
    unsupported: list[str] = []
    covered: list[str] = []  # mapped modules: their children are part of them
    for name, m in meta.named_modules():
        if any(c == "" or name.startswith(c + ".") for c in covered):
            continue
        mapper = mapper_for(m)
        if mapper is None:
            if any(True for _ in m.parameters(recurse=False)):
                unsupported.append(f"{name or 'model'} ({type(m).__name__})")
            continue
        covered.append(name)

        def pre(mod, args):
            w.depth += 1

        def post(mod, args, out, _name=name or type(m).__name__, _map=mapper):  # noqa: B008 (binds this module's name now)
            w.depth -= 1
            if w.depth == 0:
                for op, shape in _map(mod, args, out):
                    w.record(op, shape, _name)

        handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
    if unsupported:
        for h in handles:
            h.remove()
        raise PrenetError(
            f"layers not in prenet's registry: {', '.join(unsupported[:5])}; supported modules: "
            + ", ".join(sorted(t.__name__ for t in MODULE_MAPPERS))
        )
    try:
        with torch.no_grad(), _Functional(w):
            output = meta(*meta_inputs)
    finally:
        for h in handles:
            h.remove()
    return w.calls, output


def _on_meta(module: nn.Module) -> bool:
    ps = list(module.parameters()) + list(module.buffers())
    return bool(ps) and all(p.device.type == "meta" for p in ps)
