"""Image classifiers as users name them, built by torchvision or timm themselves on the ``meta`` device (no weights,
no network, any size):

* ``torchvision:NAME`` — ``torchvision.models.get_model(NAME, weights=None)``: any of torchvision's classification
  models (``torchvision.models.list_models(module=torchvision.models)``: ResNets, ConvNeXt, EfficientNets, ViT,
  Swin, RegNets, ...);
* ``timm:NAME`` — ``timm.create_model(NAME, pretrained=False)``: any of timm's architectures (``timm.list_models()``).

The example batch is ``batch_size`` RGB images at the size the model was designed for: timm's ``input_size`` of the
architecture's default pretrained config; for torchvision, the size it was published at (:func:`torchvision_defaults`:
224 for ResNet-50, 299 for Inception-v3, 600 for EfficientNet-B7, EfficientNetV2 at its training crop), else 224. ``--model-arg image_size=N`` changes it (models with a fixed
input size, such as ViTs, are built for it) and ``classes=N`` the number of classes (1000 by default). Any other
``--model-arg KEY=VALUE`` is passed to the builder by name (e.g. ``depth=6`` for a timm ViT, ``drop_path_rate=0.1``).

The loss is cross-entropy over the logits. GoogLeNet and Inception-v3 train with auxiliary heads: they run forward and
backward as in training, joined to the main logits with weight 0 (:class:`Logits`; the recipes add their own
cross-entropy at 0.3 or 0.4, two small loss ops more than here).

torchvision's wheel on the package index is a CUDA build whose C++ extension cannot load against the CPU build of torch;
its model definitions are pure Python (:mod:`prenet.torchvision_import`). Detection, segmentation, video and
optical-flow models are not offered.
"""

from __future__ import annotations

import difflib
import types
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from torch import nn

from prenet.errors import PrenetError
from prenet.torchvision_import import import_torchvision

DEFAULT_IMAGE_SIZE = 224
DEFAULT_CLASSES = 1000
#: torchvision models whose training crop is smaller than their weights' evaluation crop (torchvision's recipes:
#: EfficientNetV2 trains at 300 / 384 / 384 px and evaluates at 384 / 480 / 480)
TRAIN_CROPS = {"efficientnet_v2_s": 300, "efficientnet_v2_m": 384, "efficientnet_v2_l": 384}


class Logits(nn.Module):
    """A classifier whose forward returns ``[B, C]`` logits. Where the model also returns auxiliary heads' logits (a
    tuple in training mode: GoogLeNet, Inception-v3), they are added to the main logits with weight 0, so the heads run
    forward and backward as in training while the loss and its labels stay the main head's."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.net = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        if isinstance(out, torch.Tensor):
            return out
        main, *aux = [t for t in out if isinstance(t, torch.Tensor)]
        return main + 0.0 * sum(a.mean() for a in aux)


def import_timm() -> types.ModuleType:
    import_torchvision()  # timm imports torchvision's transforms
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import timm
    except ImportError as e:
        raise PrenetError("timm: models need timm (pinned in requirements.lock): run `make install`") from e
    return timm


def _unknown(source: str, name: str, names: list[str], listing: str) -> PrenetError:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else f"{len(names)} names: {listing}"
    return PrenetError(f"{source}:{name} is not a {source} classification model ({hint})")


def _batch(batch_size: int, image_size: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, classes, (batch_size,))


def _build(builder: Any, batch_size: int, image_size: int, classes: int, meta: bool) -> tuple[nn.Module, Any]:
    """``builder()`` wrapped in :class:`Logits`, with an example batch; on ``meta`` unless ``meta`` is False. A builder
    that computes with tensors (RegNets derive their widths with ``torch.arange`` and ``unique``) runs on the CPU with
    each parameter and buffer moved to ``meta`` as it is registered (:func:`_weights_on_meta`)."""
    from prenet.meta_device import build_on_meta

    def make(device: str | None = None) -> tuple[nn.Module, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torchvision's notices about future default initialisations
            model = builder()
            x, y = _batch(batch_size, image_size, classes)
            return Logits(model), (x.to(device), y.to(device)) if device else (x, y)

    if not meta:
        return make()
    try:
        return build_on_meta(make)
    except (NotImplementedError, RuntimeError) as e:
        if "meta" not in str(e).lower():
            raise
        with _weights_on_meta():
            return make("meta")


@contextmanager
def _weights_on_meta() -> Iterator[None]:
    """While open, every parameter and buffer a module registers is replaced by a ``meta`` copy at once (allocated on
    the CPU uninitialised, one at a time; the initialisers then run on ``meta``). A parameter registered twice (tied
    weights) gets one copy; its class and attributes are kept; lazy (uninitialised) parameters are left as they are."""
    from torch.nn.modules.module import register_module_buffer_registration_hook, register_module_parameter_registration_hook

    copies: dict[int, tuple[weakref.ref, torch.Tensor]] = {}  # id → (the original, while alive; its copy)

    def to_meta(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None or t.is_meta or isinstance(t, nn.parameter.UninitializedTensorMixin):
            return None  # keep it as registered
        seen = copies.get(id(t))
        if seen is not None and seen[0]() is t:  # the same tensor again (an id is reused once its tensor is freed)
            return seen[1]
        if isinstance(t, nn.Parameter):
            moved = type(t)(t.detach().to("meta"), requires_grad=t.requires_grad)
            moved.__dict__.update(t.__dict__)
        else:
            moved = t.to("meta")
        copies[id(t)] = (weakref.ref(t), moved)
        return moved

    handles = [
        register_module_parameter_registration_hook(lambda module, name, param: to_meta(param)),
        register_module_buffer_registration_hook(lambda module, name, buffer: to_meta(buffer)),
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def torchvision_defaults(name: str) -> int:
    """The image side (pixels) ``name`` was published at: the evaluation crop of its ``IMAGENET1K_V1`` weights (299 for
    Inception-v3, 600 for EfficientNet-B7; equal to the training crop except where :data:`TRAIN_CROPS` says), else 224
    (models published only with SWAG's fine-tuned 384-518 px weights train at 224)."""
    if name in TRAIN_CROPS:
        return TRAIN_CROPS[name]
    tv = import_torchvision()
    try:
        v1 = tv.models.get_model_weights(name)["IMAGENET1K_V1"]
        return int(v1.transforms.keywords.get("crop_size", DEFAULT_IMAGE_SIZE))
    except (ValueError, KeyError, AttributeError, TypeError):
        return DEFAULT_IMAGE_SIZE


def _size(sizes: dict[str, Any], key: str, default: int, spec: str) -> int:
    """``sizes[key]`` popped as a positive integer (``default`` when absent); a one-line error naming the model
    argument otherwise."""
    value = sizes.pop(key, default)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or (isinstance(value, float) and value != n):
        raise PrenetError(f"{spec}: --model-arg {key}={value}: give a positive integer, e.g. --model-arg {key}={default}")
    return n


def torchvision_classifier(name: str, batch_size: int, sizes: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """torchvision's classification model ``name`` (untrained) and an example batch (module docstring)."""
    tv = import_torchvision()
    names = tv.models.list_models(module=tv.models)
    if name not in names:
        raise _unknown("torchvision", name, names, "torchvision.models.list_models(module=torchvision.models)")
    sizes = dict(sizes or {})
    default = torchvision_defaults(name)
    image_size = _size(sizes, "image_size", default, f"torchvision:{name}")
    classes = _size(sizes, "classes", DEFAULT_CLASSES, f"torchvision:{name}")
    kwargs = {"weights": None, "num_classes": classes, **sizes}
    # a model built for one size takes it as image_size (ViT) or input_size (MaxViT); the others take none
    for key, value in (("image_size", image_size), ("input_size", (image_size, image_size))):
        try:
            return _checked(
                partial(tv.models.get_model, name, **kwargs, **{key: value}), f"torchvision:{name}", batch_size, image_size, classes, meta
            )
        except PrenetError as e:
            if not (isinstance(e.__cause__, TypeError) and f"'{key}'" in str(e.__cause__)):
                raise  # not this size keyword: another the builder does not take, or a size it cannot be built for
    return _checked(partial(tv.models.get_model, name, **kwargs), f"torchvision:{name}", batch_size, image_size, classes, meta)


def timm_classifier(name: str, batch_size: int, sizes: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """timm's architecture ``name`` (untrained) and an example batch (module docstring)."""
    timm = import_timm()
    if not timm.is_model(name):
        raise _unknown("timm", name, timm.list_models(), "timm.list_models('*pattern*')")
    cfg = timm.get_pretrained_cfg(name)
    sizes = dict(sizes or {})
    default = int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else DEFAULT_IMAGE_SIZE
    image_size = _size(sizes, "image_size", default, f"timm:{name}")
    classes = _size(sizes, "classes", DEFAULT_CLASSES, f"timm:{name}")
    kwargs = {"pretrained": False, "num_classes": classes, **sizes}
    if image_size != default and cfg is not None and getattr(cfg, "fixed_input_size", False):
        kwargs["img_size"] = image_size
    return _checked(partial(timm.create_model, name, **kwargs), f"timm:{name}", batch_size, image_size, classes, meta)


def _checked(builder: Any, spec: str, batch_size: int, image_size: int, classes: int, meta: bool) -> tuple[nn.Module, Any]:
    """``builder`` built; a keyword it does not take becomes one line naming it."""
    try:
        return _build(builder, batch_size, image_size, classes, meta)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise
        given = sorted(k for k in builder.keywords if k not in ("weights", "pretrained", "num_classes", "image_size", "img_size", "input_size"))
        raise PrenetError(f"{spec} does not take {', '.join(given) or 'these sizes'}: {e}") from e
    except ValueError as e:
        raise PrenetError(f"{spec} cannot be built for {image_size}² images: {' '.join(str(e).split())}") from e
