"""Working on torch's ``meta`` device (shapes, dtypes and strides only) at the speed of a command line."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable


def _disable(fn: Any = None, recursive: bool = True, **_: Any) -> Any:
    return fn if fn is not None else (lambda f: f)


def _graph_break(msg: str = "") -> None:
    """Outside ``torch.compile``, ``torch._dynamo.graph_break`` does nothing."""


#: torch modules that meta kernels import on first use only to ask a question whose answer outside ``torch.compile``
#: is known: ``torch._disable_dynamo`` imports ``torch._dynamo`` (1.2-2 s on 2 cores) for ``disable(fn)``, which is
#: ``fn`` itself; an ``Optimizer.step`` also asks it for ``graph_break()``, which does nothing. Not for whole stages:
#: a submodule import (``torch._dynamo.x``, e.g. by the profiler via ``torch._inductor``) fails under the stand-in.
#: (``symbolic_shapes``, ~0.45 s with sympy, is asked too many questions to stand in for.)
_STAND_INS: dict[str, dict[str, Any]] = {"torch._dynamo": {"disable": _disable, "graph_break": _graph_break}}


@contextmanager
def without_compiler_imports() -> Iterator[None]:
    """Build and trace on ``meta`` without importing torch's compiler stack (1.2-2 s of a CLI answer on 2 cores).

    While this context is open, each module of :data:`_STAND_INS` not yet imported is a stand-in that answers its one
    question; any other attribute asked of it imports the real module (and the stand-in leaves). Nothing changes for a
    module already imported. prenet never compiles; in a process that later calls ``torch.compile``, only the reference
    kernels first run here are not marked as skipped for dynamo."""
    placed: dict[str, _StandIn] = {}
    for name, attrs in _STAND_INS.items():
        if name in sys.modules:
            continue
        stand_in = _StandIn(name)
        stand_in.__dict__.update(attrs)
        stand_in.__getattr__ = partial(_real_attr, name)  # type: ignore[attr-defined]
        sys.modules[name] = placed[name] = stand_in
    try:
        yield
    finally:
        for name, stand_in in placed.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


def build_on_meta(builder: Callable[..., Any], **kwargs: Any) -> Any:
    """``builder(**kwargs)`` with every tensor it makes on ``meta`` (no weight memory, no compute), at CLI speed."""
    import torch

    with torch.device("meta"), without_compiler_imports():
        return builder(**kwargs)


class _StandIn(types.ModuleType):
    """A module of :data:`_STAND_INS` standing in for the real one."""


def _real_attr(name: str, attr: str) -> Any:
    """``attr`` of the real module; dunder names (``__path__``, asked by every ``from … import``) are not there."""
    if attr.startswith("__"):
        raise AttributeError(attr)
    return getattr(_real(name), attr)


def _real(name: str) -> types.ModuleType:
    """The real module ``name``, imported now if a stand-in held its place."""
    if isinstance(sys.modules.get(name), _StandIn):
        del sys.modules[name]
    return importlib.import_module(name)
