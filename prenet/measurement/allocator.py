"""Host memory allocator settings for CPU timings: keep freed memory in the process, as a GPU's caching allocator does."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 1 << 30  # blocks up to 1 GiB come from the heap, and up to 1 GiB of free heap stays mapped


@functools.cache
def keep_freed_memory() -> str:
    """Make glibc malloc keep freed memory instead of returning it to the OS, for the rest of this process.

    Why: by default glibc serves large blocks with fresh ``mmap`` pages and trims the heap after frees, so every
    training step of a small model re-faults its gradient and output buffers (measured 2026-12-01 on this host: the
    batch-16 MLP step made 1,852 page faults per step and took 11.2 ms; with memory kept, 0 faults and 7.3 ms).
    PyTorch's CUDA caching allocator never pays this, so a CPU timing with it would measure the host's allocator, not
    the ops the step-time model predicts. PyTorch's CPU tuning guide recommends jemalloc/tcmalloc for the same reason.

    Returns what was applied — ``"glibc-keep"`` or ``"default"`` (not glibc: nothing changed) — to be recorded with
    every timing made after the call. Idempotent."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return "default"
    ok = mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) == 1 and mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) == 1
    return "glibc-keep" if ok else "default"


def host_allocator(keep: bool) -> str:
    """The allocator setting for this process's timings: applies :func:`keep_freed_memory` when ``keep``; returns
    ``"glibc-keep"`` or ``"default"``, as applied (a process that applied it earlier keeps it)."""
    applied = keep or keep_freed_memory.cache_info().currsize > 0
    return keep_freed_memory() if applied else "default"
