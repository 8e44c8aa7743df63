"""What a user's ``--model`` names, built into ``(module, example_batch)`` for the step-time path, the memory estimate
and the convergence forecast:

* a zoo model (:data:`prenet.zoo.ZOO`);
* ``torchvision:NAME`` or ``timm:NAME``: an image classifier built by torchvision or timm on ``meta``
  (:mod:`prenet.image_models`), at the image size it was designed for and 1000 classes unless asked;
* ``hf:MODEL_TYPE`` or ``hf:path/to/config.json``: a Hugging Face model built by transformers on ``meta``
  (:mod:`prenet.hf_models`), sequence length 512 (or the model's maximum, when shorter) unless ``seq_len`` is given;
  without transformers installed, a GPT-2, OPT or BERT config.json is rebuilt op for op instead
  (:mod:`prenet.transformer_references`);
* ``path/to/file.py:function``.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from torch import nn

from prenet.errors import PrenetError
from prenet.measurement.steps import unpack_example
from prenet.model_sources import SOURCES


def model_names(source: str, pattern: str = "*") -> list[str]:
    """The ``--model`` specs of ``source`` (:data:`SOURCES`) whose names match the shell-style ``pattern``: zoo
    models, torchvision's classifiers, timm's architectures or transformers' model types (``hf:``, built from the
    type's default config)."""
    import fnmatch

    if source not in SOURCES:
        raise PrenetError(f"unknown model source {source!r}; choose one of {', '.join(SOURCES)}")
    if source == "zoo":
        from prenet.zoo import ZOO

        names = list(ZOO)
    elif source == "torchvision":
        from prenet.torchvision_import import import_torchvision

        tv = import_torchvision()
        names = tv.models.list_models(module=tv.models)
    elif source == "timm":
        from prenet.image_models import import_timm

        names = import_timm().list_models()
    else:
        from prenet.hf_models import import_transformers

        names = sorted(import_transformers().CONFIG_MAPPING.keys())
    return [SOURCES[source].format(n) for n in names if fnmatch.fnmatchcase(n, pattern)]


#: Packages whose import imports torchvision (transformers and timm import it whenever it is installed).
TORCHVISION_IMPORTERS = ("torchvision", "timm", "transformers")


def _import_torchvision(path: Path) -> None:
    """torchvision imported as ``torchvision:NAME`` models import it (:mod:`prenet.torchvision_import`): its C++
    extension does not load against this torch ("operator torchvision::nms does not exist"), so a plain ``import
    torchvision`` in a user's file fails; once imported this way, the file's own import finds it."""
    if importlib.util.find_spec("torchvision") is None:
        return  # not installed: the file's own import says so
    from prenet.torchvision_import import import_torchvision

    import_torchvision(f"model files that import torchvision ({path})")


def load_model_function(spec: str) -> Callable[..., Any]:
    """``path/to/file.py:function`` → the function (errors name the file and what went wrong)."""
    if ":" not in spec:
        import difflib

        from prenet.zoo import ZOO

        close = difflib.get_close_matches(spec, list(ZOO), n=3, cutoff=0.5)
        hint = f"closest zoo names: {', '.join(close)}" if close else f"zoo names: {', '.join(ZOO)}"
        raise PrenetError(
            f"{spec!r} is not a zoo model ({hint}); name torchvision:NAME, timm:NAME, hf:MODEL_TYPE, hf:config.json or path/to/file.py:function"
        )
    path_s, fn_name = spec.rsplit(":", 1)
    path = Path(path_s)
    if not path.is_file():
        raise PrenetError(
            f"model file {path} does not exist (a model is named torchvision:NAME, timm:NAME, hf:MODEL_TYPE or path/to/file.py:function)"
        )
    mod_spec = importlib.util.spec_from_file_location(f"prenet_user_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        if any(name in path.read_text(errors="replace") for name in TORCHVISION_IMPORTERS):
            _import_torchvision(path)  # before the file runs: it runs once
        try:
            mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
        except RuntimeError as e:  # it imports them through a module of its own: the file runs a second time
            if "torchvision::" not in str(e) or "torchvision" in sys.modules:
                raise
            _import_torchvision(path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except PrenetError:
        raise
    except Exception as e:  # noqa: BLE001 - any import failure becomes one clear message
        raise PrenetError(f"model file {path} failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise PrenetError(f"model file {path} has no function {fn_name!r}")
    return fn


def rebatch(example: Any, batch_size: int) -> Any:
    """``example`` (a tensor, or a tuple (inputs, labels)) with ``batch_size`` samples along its first dimension, its
    own samples repeated in turn (or the first ``batch_size`` of them); unchanged when it already has that many."""
    import torch

    inputs, labels = unpack_example(example)
    n = int(inputs.shape[0]) if inputs.dim() else 0
    if n == batch_size or n == 0:
        return example
    idx = torch.arange(batch_size, device=inputs.device) % n
    if labels is None:
        return inputs[idx]
    if not labels.dim():
        return inputs[idx], labels
    if labels.shape[0] % n:
        raise PrenetError(f"the example's labels ({labels.shape[0]}) are neither one per sample nor a whole number per sample ({n} samples)")
    k = labels.shape[0] // n  # one label per sample, or k per sample (a language model's tokens, flattened)
    return inputs[idx], labels.reshape(n, k, *labels.shape[1:])[idx].reshape(batch_size * k, *labels.shape[1:])


def build_model(spec: str, batch_size: int, zoo_kwargs: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """A zoo name or ``file.py:function``, called with ``batch_size=N`` when it accepts it; must return
    ``(module, example_batch)``. A function without ``batch_size`` gets its example batch brought to ``batch_size``
    samples (:func:`rebatch`): the step is answered at the batch size asked. Zoo models are built on the meta device
    (no weight memory) unless ``meta`` is False, with the builder keywords ``zoo_kwargs`` (e.g. ``{"image_size": 224}``)."""
    from prenet.meta_device import build_on_meta
    from prenet.zoo import ZOO

    if spec.startswith(("torchvision:", "timm:")):
        from prenet.image_models import timm_classifier, torchvision_classifier

        source, name = spec.split(":", 1)
        build = torchvision_classifier if source == "torchvision" else timm_classifier
        return build(name, batch_size, zoo_kwargs, meta=meta)
    if spec.startswith("hf:"):
        if importlib.util.find_spec("transformers") is not None:
            from prenet.hf_models import hf_model

            return hf_model(spec.split(":", 1)[1], batch_size, zoo_kwargs or {}, meta=meta)
        return _hf_config(spec.split(":", 1)[1], batch_size, zoo_kwargs or {}, meta)
    if spec in ZOO:
        try:
            if meta:
                return build_on_meta(ZOO[spec], batch_size=batch_size, **(zoo_kwargs or {}))
            return ZOO[spec](batch_size=batch_size, **(zoo_kwargs or {}))
        except TypeError as e:
            params = [p for p in inspect.signature(ZOO[spec]).parameters if p != "batch_size"]
            raise PrenetError(f"zoo model {spec!r} does not take {zoo_kwargs}: {e}; its sizes are {', '.join(params)}") from e
    if zoo_kwargs:
        raise PrenetError(f"--model-arg and --seq-len apply to named models only; {spec} is a file model (set its sizes in the file)")
    fn = load_model_function(spec)
    accepts = "batch_size" in inspect.signature(fn).parameters
    try:
        result = fn(batch_size=batch_size) if accepts else fn()
    except Exception as e:  # noqa: BLE001
        raise PrenetError(f"{spec} raised {type(e).__name__}: {e}") from e
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module)):
        raise PrenetError(f"{spec} must return (module, example_batch), got {type(result).__name__}")
    unpack_example(result[1])
    return result if accepts else (result[0], rebatch(result[1], batch_size))


def _hf_config(path_s: str, batch_size: int, sizes: dict[str, Any], meta: bool = True) -> tuple[nn.Module, Any]:
    from contextlib import nullcontext

    import torch

    from prenet.hf_models import read_config_json
    from prenet.transformer_references import ARCHITECTURES, from_config

    path = Path(path_s)
    if not path_s.endswith(".json"):
        raise PrenetError(f"hf:{path_s}: a model type needs transformers (pinned in requirements.lock): run `make install`")
    config = read_config_json(path)
    arch = (config.get("architectures") or ["(none)"])[0]
    if arch not in ARCHITECTURES:
        raise PrenetError(f"{path}: architecture {arch!r} is not rebuilt here; supported: {', '.join(ARCHITECTURES)}")
    unknown = set(sizes) - {"seq_len"}
    if unknown:
        raise PrenetError(f"hf: models take seq_len (--seq-len N), not {', '.join(sorted(unknown))}")
    longest = int(config.get("n_positions") or config.get("max_position_embeddings") or 512)
    seq_len = int(sizes.get("seq_len", min(512, longest)))
    if not 1 <= seq_len <= longest:
        raise PrenetError(f"seq_len {seq_len} is outside 1..{longest}, the positions {path} allows")
    try:
        with torch.device("meta") if meta else nullcontext():
            return from_config(config, batch_size=batch_size, seq_len=seq_len)
    except KeyError as e:
        raise PrenetError(f"{path}: config field {e} is missing (architecture {arch})") from e
