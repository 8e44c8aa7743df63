"""Independent work items of a stage run in ``workers`` spawned processes of ``threads`` threads each, results in
input order. ``workers=1`` runs in this process. Used by the convergence stages, whose sweep configurations are
independent; timings taken inside the items then share the machine with ``workers - 1`` other processes, so every
stage that uses this records ``workers`` next to ``threads``."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _init(threads: int, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    """A spawned worker's start: its own environment, so the variables stay set for its lifetime."""
    # torch only where the work already loaded it (the outcome stages need none: 2 s saved per process); a torch
    # imported later reads its thread count from these variables
    for var in _THREAD_VARS:
        os.environ[var] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def _in_process(threads: int, initializer: Callable[..., None] | None, initargs: tuple) -> Iterator[None]:
    """``_init`` for the calling process, whose environment and (when it had imported torch) torch's thread count are
    put back afterwards (a torch the items imported keeps ``threads``, as torch reads the variables only once)."""
    saved = {var: os.environ.get(var) for var in _THREAD_VARS}
    torch_threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    try:
        _init(threads, initializer, initargs)
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        if torch_threads is not None:
            sys.modules["torch"].set_num_threads(torch_threads)


def _spawned(workers: int, threads: int, initializer: Callable[..., None] | None, initargs: tuple) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes (spawn, not fork: fork can deadlock once OpenMP has run in this process),
    each started by :func:`_init`."""
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init, initargs=(threads, initializer, initargs))


def run_items(
    fn: Callable[[T], Any],
    items: Iterable[T],
    *,
    workers: int,
    threads: int,
    desc: str,
    progress: bool,
    unit: str = "config",
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
) -> Iterator[Any]:
    """``fn(item)`` for every item (``fn`` a module-level function, items picklable), in input order; each process
    (this one when ``workers`` ≤ 1) first sets ``threads`` and calls ``initializer(*initargs)``."""
    items = list(items)
    with tqdm(total=len(items), desc=desc, unit=unit, disable=not progress) as bar:
        if workers <= 1:
            with _in_process(threads, initializer, initargs):
                for it in items:
                    yield fn(it)
                    bar.update()
            return
        with _spawned(workers, threads, initializer, initargs) as ex:
            for r in ex.map(fn, items):
                yield r
                bar.update()


@contextmanager
def in_background(fn: Callable[[T], Any], item: T, *, threads: int) -> Iterator[Future]:
    """``fn(item)`` in one spawned worker process of ``threads`` threads while the caller goes on (``fn`` module-level,
    ``item`` picklable); yields its future, and waits for the worker when the block ends. For work that times nothing.
    A block that raises stops the worker instead (its result could no longer be used) and raises at once."""
    ex = _spawned(1, threads, None, ())
    try:
        yield ex.submit(fn, item)
    except BaseException:
        for proc in list((getattr(ex, "_processes", None) or {}).values()):  # the executor's own workers (CPython)
            proc.terminate()
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown(wait=True)
