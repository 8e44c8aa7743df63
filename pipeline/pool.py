"""Independent work items of a stage run in ``workers`` spawned processes of ``threads`` threads each, results in
input order. ``workers=1`` runs in this process. Used by the convergence stages, whose sweep configurations are
independent; timings taken inside the items then share the machine with ``workers - 1`` other processes, so every
stage that uses this records ``workers`` next to ``threads``."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


def _init(threads: int, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    # torch only where the work already loaded it (the outcome stages need none: 2 s saved per process); a torch
    # imported later reads its thread count from these variables
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    if initializer is not None:
        initializer(*initargs)


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
            _init(threads, initializer, initargs)
            for it in items:
                yield fn(it)
                bar.update()
            return
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init, initargs=(threads, initializer, initargs)) as ex:
            for r in ex.map(fn, items):
                yield r
                bar.update()
