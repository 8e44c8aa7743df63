"""Shards of independent work items, written so that a killed or re-routed run can never corrupt or double a result.

A shard is a fixed slice of a list of items sampled from a fixed seed (:func:`shard_slice`), so every machine
that runs shard *k* of *K* works on the same items. While it runs, each finished item is appended to a *scratch*
JSONL (one line per item, flushed and fsync'ed) that lives outside any DVC output; a re-run resumes after the
last complete line (:func:`open_scratch`). When every item is done the scratch is *promoted*: its lines, sorted by
the item's natural key and byte-for-byte unchanged, replace the shard's output file in one ``os.replace``
(:func:`promote`). A merge reads every promoted shard and keeps each key once (:func:`merge_lines`); it too writes
atomically, so an interrupted merge leaves the last good output in place.

The hardware guard (:func:`check_hardware`) compares the machine's declared id (``PRENET_HARDWARE``) with the one a
shard was created for: a mis-routed shard refuses instead of timing the wrong device.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from prenet.errors import PrenetError

#: The environment variable through which a machine (its worker) declares its hardware id.
HARDWARE_ENV = "PRENET_HARDWARE"
#: Every shard row holds its natural key under this field.
KEY = "key"

T = TypeVar("T")


def shard_slice(items: Sequence[T], shard: int, shards: int) -> list[T]:
    """Items ``shard``, ``shard + shards``, … of ``items`` (round-robin, so long and short items spread evenly)."""
    if shards < 1 or not 0 <= shard < shards:
        raise PrenetError(f"shard {shard} of {shards} does not exist; shards are numbered 0..{max(shards - 1, 0)}")
    return list(items[shard::shards])


def check_hardware(expected: str, env: dict[str, str] | None = None) -> str:
    """Return the machine's hardware id if it is ``expected``; raise (one line, what to do) otherwise."""
    have = (os.environ if env is None else env).get(HARDWARE_ENV, "")
    if not have:
        raise PrenetError(f"this machine declares no hardware id; start its worker with {HARDWARE_ENV}={expected} "
                          f"(only on a machine that is {expected!r}), so shards for {expected!r} may run here")
    if have != expected:
        raise PrenetError(f"this shard was created for hardware {expected!r} but this machine is {HARDWARE_ENV}={have!r}; "
                          f"refusing to run it here (submit it to the {expected!r} work queue)")
    return have


def _complete_lines(path: Path) -> tuple[list[bytes], int]:
    """The complete (newline-terminated, valid JSON) lines of ``path`` and the byte length they span. A line torn
    by a kill mid-write, and anything after it, is not counted."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    lines, end = [], 0
    for raw in data.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            break
        try:
            json.loads(raw)
        except ValueError:
            break
        lines.append(raw)
        end += len(raw)
    return lines, end


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The complete rows of a scratch or shard JSONL (a torn last line is ignored)."""
    return [json.loads(raw) for raw in _complete_lines(Path(path))[0]]


def read_shards(shard_dir: Path) -> Iterator[dict[str, Any]]:
    """Every complete row in the ``*.jsonl`` files of a resumable measurement folder (one file per run, appended line by
    line, so a kill can tear only its last line: :func:`read_rows` skips it)."""
    for path in sorted(shard_dir.glob("*.jsonl")):
        yield from read_rows(path)


def open_scratch(path: str | Path) -> tuple[IO[bytes], set[str]]:
    """Open a shard's scratch JSONL for appending, after cutting off a line torn by an earlier kill; return the
    handle and the keys already done (the resume point)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines, end = _complete_lines(p)
    fh = p.open("ab")
    fh.truncate(end)
    fh.seek(end)
    return fh, {json.loads(raw)[KEY] for raw in lines}


def append_row(fh: IO[bytes], row: dict[str, Any]) -> None:
    """Append one finished item (``row[KEY]`` its natural key) as a JSON line, flushed and fsync'ed."""
    if KEY not in row:
        raise ValueError(f"a shard row needs its natural key under {KEY!r}")
    fh.write((json.dumps(row, sort_keys=True, default=float) + "\n").encode())
    fh.flush()
    os.fsync(fh.fileno())


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a fsync'ed temporary file in the same folder and ``os.replace``: readers
    see the old file or the new one, never a part."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def promote(scratch: str | Path, out: str | Path, expected_keys: Iterable[str]) -> int:
    """Promote a finished scratch into the shard output: its lines for ``expected_keys``, sorted by key and
    byte-identical to the scratch, written atomically. Raises if any expected key is missing. Returns the count."""
    want = set(expected_keys)
    by_key: dict[str, bytes] = {}
    for raw in _complete_lines(Path(scratch))[0]:
        k = json.loads(raw)[KEY]
        if k in want:
            by_key.setdefault(k, raw)   # a key done twice (never by design) keeps its first result
    missing = want - set(by_key)
    if missing:
        raise PrenetError(f"{scratch}: {len(missing)} of {len(want)} items are not done (e.g. {sorted(missing)[0]}); "
                          "run the shard again to finish it")
    atomic_write_bytes(out, b"".join(by_key[k] for k in sorted(by_key)))
    return len(by_key)


def item_path(folder: str | Path, key: str) -> Path:
    """The one file of item ``key`` in a per-item output folder (keys that are not plain file names are hashed)."""
    import hashlib
    import re

    name = key if re.fullmatch(r"[A-Za-z0-9_.-]{1,120}", key) else hashlib.sha256(key.encode()).hexdigest()[:32]
    return Path(folder) / f"{name}.json"


def write_item(folder: str | Path, row: dict[str, Any]) -> bool:
    """Write one finished item as its own file, atomically and only once: a task re-run (Dask re-runs tasks whose
    results lived on a dead worker) finds the file and leaves it. Returns whether this call wrote it."""
    p = item_path(folder, row[KEY])
    if p.exists():
        return False
    atomic_write_bytes(p, (json.dumps(row, sort_keys=True, default=float) + "\n").encode())
    return True


def promote_items(folder: str | Path, out: str | Path, expected_keys: Iterable[str]) -> int:
    """Promote a per-item folder like :func:`promote`: one line per expected key, sorted, written atomically."""
    keys = sorted(set(expected_keys))
    missing = [k for k in keys if not item_path(folder, k).exists()]
    if missing:
        raise PrenetError(f"{folder}: {len(missing)} of {len(keys)} items are not done (e.g. {missing[0]}); run the shard again to finish it")
    atomic_write_bytes(out, b"".join(item_path(folder, k).read_bytes() for k in keys))
    return len(keys)


def merge_lines(paths: Iterable[str | Path], *, per_hardware: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Rows of every promoted shard in ``paths``, each natural key once (the first shard in path order wins) — or
    once per hardware id with ``per_hardware`` (a benchmark times the same keys on every device) — sorted by
    (hardware,) key; and how many duplicates were dropped."""
    seen: dict[tuple[str, ...], dict[str, Any]] = {}
    dropped = 0
    for p in sorted(Path(x) for x in paths):
        for row in read_rows(p):
            k = (str(row.get("hardware", "")), row[KEY]) if per_hardware else (row[KEY],)
            if k in seen:
                dropped += 1
                continue
            seen[k] = row
    return [seen[k] for k in sorted(seen)], dropped


def retire(scratch: str | Path) -> Path | None:
    """Move a promoted shard's scratch (file, or per-item folder) aside to ``<name>.done``: a later run of the stage
    (after its code or inputs changed) starts afresh instead of promoting these results again; the last finished
    scratch stays readable. Returns the new path."""
    import shutil

    p = Path(scratch)
    if not p.exists():
        return None
    done = p.with_name(p.name + ".done")
    if done.is_dir():
        shutil.rmtree(done)
    os.replace(p, done)
    return done
