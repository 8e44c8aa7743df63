"""Activation checkpointing as users switch it on: each block of a model's repeated stack runs under
``torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False)``. The backward pass then recomputes each block's
forward (its ops appear in the traced backward), and only the blocks' inputs stay saved for backward (the memory
estimate's saved-tensor trace sees exactly that).

The repeated stack is found, not declared: every ``nn.ModuleList``/``nn.Sequential`` whose children are two or more
modules of one type with parameters, outermost first (a transformer's layer list, a ResNet's stages). A model without
one is refused in one line.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from contextvars import ContextVar
from typing import Any, Callable

from torch import nn
from torch.utils.checkpoint import checkpoint

from prenet.errors import PrenetError

#: The mixed-precision context a meta trace runs its forward under (prenet's own autocast: torch.autocast acts on real
#: devices only): the recompute re-enters it, as torch's checkpoint re-enters torch.autocast on a real device
RECOMPUTE_CONTEXT: ContextVar[Callable[[], Any] | None] = ContextVar("prenet_recompute_context", default=None)


def _contexts() -> tuple[Any, Any]:
    make = RECOMPUTE_CONTEXT.get()
    return nullcontext(), (make() if make is not None else nullcontext())


class Checkpointed(nn.Module):
    """``block`` recomputed in the backward pass instead of keeping its activations."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(self.block, *args, use_reentrant=False, context_fn=_contexts, **kwargs)


def _stack(container: nn.Module) -> bool:
    kids = list(container.children())
    return (
        isinstance(container, (nn.ModuleList, nn.Sequential))
        and len(kids) >= 2
        and len({type(k) for k in kids}) == 1
        and all(any(True for _ in k.parameters()) for k in kids)
    )


def checkpointed(module: nn.Module) -> tuple[nn.Module, int]:
    """A copy of ``module`` with every block of its repeated stacks checkpointed, and how many blocks that is."""
    out = copy.deepcopy(module)
    wrapped = 0
    done: list[str] = []
    for name, sub in list(out.named_modules()):
        if any(d == "" or name.startswith(d + ".") for d in done) or not _stack(sub):
            continue
        for key, child in list(sub.named_children()):
            sub._modules[key] = Checkpointed(child)
            wrapped += 1
        done.append(name)
    if not wrapped:
        raise PrenetError(
            f"--checkpointing: {type(module).__name__} has no repeated stack of blocks to checkpoint (an nn.ModuleList or "
            "nn.Sequential of two or more modules of one type); checkpoint inside the model instead"
        )
    return out, wrapped
