"""How far back each op's operands were last touched: the LRU stack distance of every read of a traced step.

A CPU op is timed in place with warm operands (the op benchmark repeats it), while inside a step an operand comes from
DRAM when more distinct data than the caches hold was touched since its last use. The distance of a read is the bytes
of the distinct tensors (storages) touched between the previous touch of its storage (read or written) and this read.
The step is replayed twice, as a steady state of back-to-back steps: the weights a forward reads were last written by
the previous step's optimizer, so every read has a distance (its storage was touched in the first replay, if only by
this very read).
No torch here: the tracer hands in (record, storage, bytes, read) tuples.
"""

from __future__ import annotations

from collections.abc import Sequence

#: one touch of a storage by an op: (record index, storage key, bytes, whether the op reads it)
Touch = tuple[int, int, int, bool]


class _Fenwick:
    """Prefix sums over positions (bytes of the storages whose last touch sits there)."""

    def __init__(self, n: int) -> None:
        self.tree = [0] * (n + 1)

    def add(self, i: int, v: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += v
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over positions < ``i``."""
        s = 0
        while i > 0:
            s += self.tree[i]
            i -= i & -i
        return s


def read_distances(touches: Sequence[Touch], records: int) -> list[list[list[int]]]:
    """Per record (``records`` of them), its reads as ``[bytes, distance]`` pairs: ``distance`` the distinct bytes
    touched since the storage's previous touch, in the steady state of repeated steps (module docstring)."""
    out: list[list[list[int]]] = [[] for _ in range(records)]
    n = len(touches)
    tree = _Fenwick(2 * n)
    last: dict[int, int] = {}
    held: dict[int, int] = {}  # position -> bytes counted there
    for p in range(2 * n):
        rec, key, size, is_read = touches[p % n]
        q = last.get(key)
        if q is None:
            dist = -1
        else:
            dist = tree.prefix(p) - tree.prefix(q + 1)
            tree.add(q, -held.pop(q))
        tree.add(p, size)
        held[p] = size
        last[key] = p
        if p >= n and is_read:
            out[rec].append([size, dist])
    return out


def cold_bytes(reads: Sequence[Sequence[int]], capacity_bytes: float) -> int:
    """The bytes of ``reads`` (``[bytes, distance]`` pairs, :func:`read_distances`) that come from DRAM: those that,
    with the distinct data touched since their last touch, outgrow ``capacity_bytes`` (an LRU cache holds an operand
    while it and what came after it fit)."""
    return int(sum(b for b, d in reads if d + b > capacity_bytes))
