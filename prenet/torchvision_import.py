"""Importing torchvision where its C++ extension cannot load.

The package index's torchvision wheel is a CUDA build: its extension (detection ops such as ``nms``, image decoding)
does not load against the CPU build of torch, and ``import torchvision`` then fails while registering fake kernels for
the missing ops. transformers imports torchvision whenever it is installed, so every ``hf:`` model needs this too.
"""

from __future__ import annotations

import sys
import types
import warnings

from prenet.errors import PrenetError


def import_torchvision(purpose: str = "torchvision: models") -> types.ModuleType:
    """``torchvision``, imported even where its C++ extension cannot load: the fake kernels it registers for the
    extension's ops are then skipped. Its model definitions are pure Python; only detection models call those ops.
    ``purpose`` names what needs it in the error when torchvision is missing."""
    stub = "torchvision._meta_registrations"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Failed to load image Python extension": image decoding is not used
            try:
                import torchvision
            except RuntimeError as e:
                if "torchvision::" not in str(e):
                    raise
                for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
                    del sys.modules[name]
                sys.modules[stub] = types.ModuleType(stub)
                try:
                    import torchvision
                except BaseException:
                    sys.modules.pop(stub, None)
                    raise
    except ImportError as e:
        raise PrenetError(f"{purpose} need torchvision (pinned in requirements.lock): run `make install`") from e
    return torchvision
