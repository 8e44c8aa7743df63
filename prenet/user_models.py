"""What a user's ``--model`` names: a zoo model (:data:`prenet.zoo.ZOO`) or ``path/to/file.py:function``, built into
``(module, example_batch)`` for the step-time path, the memory estimate and the convergence forecast."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import Any, Callable

from torch import nn

from prenet.errors import PrenetError
from prenet.measurement.steps import unpack_example


def load_model_function(spec: str) -> Callable[..., Any]:
    """``path/to/file.py:function`` → the function (errors name the file and what went wrong)."""
    if ":" not in spec:
        raise PrenetError(f"{spec!r}: expected a zoo name or path/to/file.py:function")
    path_s, fn_name = spec.rsplit(":", 1)
    path = Path(path_s)
    if not path.is_file():
        raise PrenetError(f"model file {path} does not exist")
    mod_spec = importlib.util.spec_from_file_location(f"prenet_user_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as e:  # noqa: BLE001 - any import failure becomes one clear message
        raise PrenetError(f"model file {path} failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise PrenetError(f"model file {path} has no function {fn_name!r}")
    return fn


def build_model(spec: str, batch_size: int, zoo_kwargs: dict[str, Any] | None = None, *, meta: bool = True) -> tuple[nn.Module, Any]:
    """A zoo name or ``file.py:function``, called with ``batch_size=N`` when it accepts it; must return
    ``(module, example_batch)``. Zoo models are built on the meta device (no weight memory) unless ``meta`` is
    False, with the builder keywords ``zoo_kwargs`` (e.g. ``{"image_size": 224}``)."""
    from prenet.meta_device import build_on_meta
    from prenet.zoo import ZOO

    if spec in ZOO:
        try:
            if meta:
                return build_on_meta(ZOO[spec], batch_size=batch_size, **(zoo_kwargs or {}))
            return ZOO[spec](batch_size=batch_size, **(zoo_kwargs or {}))
        except TypeError as e:
            params = [p for p in inspect.signature(ZOO[spec]).parameters if p != "batch_size"]
            raise PrenetError(f"zoo model {spec!r} does not take {zoo_kwargs}: {e}; its sizes are {', '.join(params)}") from e
    if zoo_kwargs:
        raise PrenetError(f"--zoo-arg applies to zoo models only; {spec} is a file model (set its sizes in the file)")
    fn = load_model_function(spec)
    accepts = "batch_size" in inspect.signature(fn).parameters
    try:
        result = fn(batch_size=batch_size) if accepts else fn()
    except Exception as e:  # noqa: BLE001
        raise PrenetError(f"{spec} raised {type(e).__name__}: {e}") from e
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module)):
        raise PrenetError(f"{spec} must return (module, example_batch), got {type(result).__name__}")
    unpack_example(result[1])
    return result
