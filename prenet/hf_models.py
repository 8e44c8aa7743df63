"""Hugging Face models as users name them, built with ``transformers`` itself on the ``meta`` device (no weights, no
network, any size: a 7 B-parameter Llama builds in well under a second):

* ``hf:MODEL_TYPE`` — transformers' default configuration of that model type (``gpt2``, ``llama``, ``bert``, ...);
* ``hf:path/to/config.json`` — a configuration as found next to a model's weights.

The model is the architecture the config names (``architectures[0]``), else the type's causal-LM head, else its
masked-LM head; it runs as transformers runs it by default (its default attention implementation, SDPA where the
model supports it). The example batch is ``batch_size × seq_len`` token ids (512, or the model's maximum when shorter,
unless ``seq_len`` is given); the loss is cross-entropy over the ``(batch · seq_len, vocab)`` logits, as for the
rebuilt transformers of :mod:`prenet.transformer_references` (which check NeuSight's timings without transformers).
An encoder-decoder (T5) gets the same ids as its decoder's input. A vision config (an image size and channels, no
vocabulary: ViT, Swin, ConvNeXt) is built with its image-classification head and trained on ``batch_size`` images of
its ``image_size`` against its ``num_labels`` classes.
Other ``--model-arg KEY=VALUE`` values override config fields of the same name (``num_hidden_layers=4``,
``_attn_implementation=eager``).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prenet.errors import PrenetError, first_line

DEFAULT_SEQ_LEN = 512
#: image side for a vision config that has none (convolutional ones take any): ImageNet's training crop
DEFAULT_IMAGE_SIZE = 224


def _no_padding_check(*_args: Any, **_kwargs: Any) -> None:
    """transformers' ``warn_if_padding_and_no_attention_mask``, skipped: it reads the ids' values (``pad_token_id in
    ids[:, [-1, 0]]``, an ``.item()``), which a trace on the meta device has not, and it only warns; the ids here hold
    no padding."""


class LMLogits(nn.Module):
    """A transformers language model whose forward takes token ids and returns its logits as ``(batch · seq, vocab)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.lm = model
        for m in model.modules():  # DeBERTa-v2 and others check the ids for padding when given no attention mask
            if hasattr(m, "warn_if_padding_and_no_attention_mask"):
                m.warn_if_padding_and_no_attention_mask = _no_padding_check

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if getattr(self.lm.config, "is_encoder_decoder", False):
            out = self.lm(input_ids=ids, decoder_input_ids=ids)
        else:
            out = self.lm(input_ids=ids)
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = getattr(out, "prediction_logits", None)
        if logits is None:
            logits = out.last_hidden_state
        return logits.flatten(0, 1)


class ImageLogits(nn.Module):
    """A transformers image classifier whose forward takes pixels and returns its ``(batch, classes)`` logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.vision = model

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.vision(pixel_values=pixels).logits


def image_classifier(config: Any) -> str | None:
    """The image-classification model transformers has for ``config``'s type (the first where it lists several, e.g.
    DeiT's plain head before the distillation one); None for a text model (one with a causal or masked language-model
    head; Perceiver has both) or a type without one."""
    from transformers.models.auto import modeling_auto

    kind = config.model_type
    if kind in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or kind in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return None
    name = modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.get(kind)
    return name[0] if isinstance(name, (tuple, list)) else name


def import_transformers() -> Any:
    if importlib.util.find_spec("torchvision") is not None:
        from prenet.torchvision_import import import_torchvision

        import_torchvision("hf: models (transformers imports torchvision when it is installed)")
    try:
        import transformers
    except ImportError as e:
        raise PrenetError("hf: models need transformers (pinned in requirements.lock): run `make install`") from e
    transformers.logging.set_verbosity_error()
    return transformers


def transformers_major() -> int:
    """The installed transformers' major version (the rebuilds of :mod:`prenet.transformer_references` follow it)."""
    return int(import_transformers().__version__.split(".")[0])


def read_config_json(path: Path) -> dict[str, Any]:
    """The fields of a config.json (errors name the file and what was wrong)."""
    if not path.is_file():
        raise PrenetError(f"config file {path} does not exist")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise PrenetError(f"{path} is not valid JSON: {e}") from e


def config_from_fields(fields: dict[str, Any], where: str) -> Any:
    """transformers' configuration from a config.json's fields (``where``: what to name in an error)."""
    tf = import_transformers()
    from huggingface_hub.errors import StrictDataclassError

    if "model_type" not in fields:
        raise PrenetError(f"{where}: config field 'model_type' is missing (transformers needs it to pick the architecture)")
    try:
        return tf.AutoConfig.for_model(fields["model_type"], **{k: v for k, v in fields.items() if k != "model_type"})
    except (ValueError, KeyError, TypeError, StrictDataclassError) as e:  # huggingface_hub validates each field's type
        raise PrenetError(f"{where}: transformers cannot read this config: {' '.join(str(e).split())}") from e


def hf_config(spec: str) -> Any:
    """transformers' configuration for ``spec`` (a model type or a config.json path); errors name what was wrong."""
    tf = import_transformers()
    if spec.endswith(".json") or "/" in spec:
        return config_from_fields(read_config_json(Path(spec)), str(spec))
    try:
        return tf.AutoConfig.for_model(spec)
    except ValueError as e:
        known = list(tf.CONFIG_MAPPING.keys())
        close = difflib.get_close_matches(spec, known, n=3)
        hint = f"closest: {', '.join(close)}" if close else f"e.g. {', '.join(sorted(known)[:8])}, ..."
        raise PrenetError(f"hf:{spec} is not a transformers model type ({hint}); or give hf:path/to/config.json") from e


def build_from_config(config: Any) -> nn.Module:
    """The model ``config`` names (``architectures[0]``), else its type's causal-LM, masked-LM or bare model, built on
    the current device (``meta`` under ``torch.device("meta")``)."""
    tf = import_transformers()
    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch and hasattr(tf, arch):
        return getattr(tf, arch)(config)
    for auto in (tf.AutoModelForCausalLM, tf.AutoModelForMaskedLM, tf.AutoModel):
        try:
            return auto.from_config(config)
        except ValueError:  # no model of that kind for this config type
            continue
    raise PrenetError(f"transformers has no model for the {config.model_type} config that takes token ids; choose another hf: type")


def hf_model(spec: str, batch_size: int, sizes: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """``(model, (ids, labels))`` for ``hf:<spec>`` (a vision config: ``(model, (pixels, labels))``): ``sizes`` holds
    ``seq_len`` and config overrides. Where transformers itself fails to build the model (some types' default configs
    lack fields their models read: DBRX, Hunyuan, Nemotron), one line says so and what to give instead."""
    try:
        with offline():
            return _hf_model(spec, batch_size, sizes, meta=meta)
    except (PrenetError, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - transformers' own failure, said in one line
        first = first_line(e).rstrip(" :")
        listed = "`prenet models hf` lists the types that build"
        if "huggingface.co" in first:
            raise PrenetError(
                f"transformers could not build hf:{spec}: its config loads files from the Hugging Face hub, and prenet downloads "
                f"nothing at run time; {listed}"
            ) from e
        if isinstance(e, ImportError):
            needs = first.split(". ")[0] if first else f"module {e.name}"
            raise PrenetError(f"transformers could not build hf:{spec}: it needs a package prenet does not install ({needs}); {listed}") from e
        fields = [str(k) for k in sizes or {} if k not in ("seq_len", "image_size")]  # not config fields: prenet's sizes
        if fields:
            raise PrenetError(
                f"transformers could not build hf:{spec} with the config fields given ({', '.join(fields)}): {type(e).__name__}: {first}"
            ) from e
        if spec.endswith(".json"):
            raise PrenetError(f"transformers could not build the model {spec} describes ({type(e).__name__}: {first})") from e
        raise PrenetError(
            f"transformers could not build hf:{spec} ({type(e).__name__}: {first}); its default config may be incomplete: give a "
            f"released checkpoint's config.json instead (--model hf:path/to/config.json; {listed})"
        ) from e


@contextmanager
def offline() -> Iterator[None]:
    """The Hugging Face hub offline while a model is built: nothing is downloaded at run time, so a config that names a
    hub checkpoint (EdgeTAM's timm backbone) fails at once, in one line, instead of retrying the network for a minute;
    the process's own setting is restored after."""
    import huggingface_hub.constants as hub

    was = hub.HF_HUB_OFFLINE
    hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = was


def _hf_model(spec: str, batch_size: int, sizes: dict[str, Any] | None, *, meta: bool) -> tuple[nn.Module, Any]:
    config = hf_config(spec)
    sizes = dict(sizes or {})
    classifier = image_classifier(config)
    if classifier is not None:
        return _vision_model(spec, config, classifier, batch_size, sizes, meta)
    longest = int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or DEFAULT_SEQ_LEN)
    seq_len = int(sizes.pop("seq_len", min(DEFAULT_SEQ_LEN, longest)))
    if not 1 <= seq_len <= longest:
        raise PrenetError(f"seq_len {seq_len} is outside 1..{longest}, the positions hf:{spec} allows")
    _override(spec, config, sizes)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))  # before building: a ForCausalLM clears it
    with torch.device("meta") if meta else nullcontext():
        model = build_from_config(config)
        ids = torch.ones(batch_size, seq_len, dtype=torch.long)
    wrapped = LMLogits(model)
    if encoder_decoder and type(model).__name__.endswith("ForCausalLM"):
        # what the answer says: transformers builds this encoder-decoder for token inputs only as its decoder (Whisper)
        wrapped.prenet_note = (
            f"hf:{spec} is an encoder-decoder model, built as {type(model).__name__}: its decoder alone, on {seq_len} tokens; "
            "the encoder (audio or image features) is not in the step"
        )
    return wrapped, (ids, ids.flatten())


def _override(spec: str, config: Any, sizes: dict[str, Any]) -> None:
    """Set the config fields ``sizes`` names; one that the config lacks is one line naming the closest field."""
    for key, value in sizes.items():
        if not hasattr(config, key):
            close = difflib.get_close_matches(key, list(config.to_dict()), n=3)
            raise PrenetError(f"hf:{spec} has no config field {key!r}{f' (closest: {close[0]})' if close else ''}; --model-arg sets config fields")
        setattr(config, key, value)


def _vision_model(spec: str, config: Any, classifier: str, batch_size: int, sizes: dict[str, Any], meta: bool) -> tuple[nn.Module, Any]:
    """``(model, (pixels, labels))`` for a vision config: its image-classification head (``classifier``) on
    ``image_size``² images: the config's, or for a convolutional config without one (ResNet, RegNet, PoolFormer,
    SegFormer) ``sizes["image_size"]``, by default :data:`DEFAULT_IMAGE_SIZE`."""
    side = sizes.pop("image_size", DEFAULT_IMAGE_SIZE) if not hasattr(config, "image_size") else None
    _override(spec, config, sizes)
    tf = import_transformers()
    if side is None:
        side = config.image_size if isinstance(config.image_size, int) else int(config.image_size[0])
    with torch.device("meta") if meta else nullcontext():
        model = getattr(tf, classifier)(config)
        pixels = torch.randn(batch_size, int(getattr(config, "num_channels", 3)), int(side), int(side))
        labels = torch.zeros(batch_size, dtype=torch.long)
    return ImageLogits(model), (pixels, labels)
