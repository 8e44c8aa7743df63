"""One training job's traced steps (one per device type, gradient accumulation applied) and its predicted peak memory,
stored on disk under everything that shapes them.

Tracing needs torch, and importing torch alone takes 2-3 s on a 2-core host. A repeated question about the same job
(another GPU, price, step count or dataset size) is answered from the stored trace, without importing torch or tracing
again. The key covers: the model spec and the contents of the config file it names, the batch size, the size keywords,
the optimizer, precision, device type, fused optimizer, memory format, gradient accumulation and checkpointing, the
source of every ``prenet`` module and torch's version. A change to any of them is a new key, so a stored trace is
exactly the trace this code would make now.

Only named models are stored: zoo names, ``torchvision:NAME``, ``timm:NAME``, ``hf:MODEL_TYPE`` and
``hf:path/config.json`` (with the version of the library that builds them). A
``path/file.py:function`` model runs the user's code, which may read anything, so it is traced every time.

``PRENET_TRACE_CACHE=off`` turns the store off; ``PRENET_CACHE_DIR`` moves it (default ``$XDG_CACHE_HOME/prenet``,
else ``~/.cache/prenet``)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from prenet.memory.estimate import MemoryEstimate
from prenet.ops.records import OpRecord, StepTrace

#: Bump when the stored layout changes (old entries are then never read).
FORMAT = 2
_PACKAGE = Path(__file__).resolve().parents[1]
#: model-spec prefix → the distributions that build such a model (timm builds with torchvision's layers too)
_BUILDERS = {"hf": ("transformers",), "torchvision": ("torchvision",), "timm": ("timm", "torchvision")}


@dataclass
class JobTrace:
    """``traces``: the traced step per device type (``cpu`` | ``cuda``); ``memory``: the predicted peak of a step (None
    when not asked for);
    ``blocks``: blocks under activation checkpointing (0: none); ``stored``: read back from the store, not traced now."""

    traces: dict[str, StepTrace]
    memory: MemoryEstimate | None
    blocks: int
    stored: bool = False
    #: how ``memory`` was traced when its FP32 forward could not run (in BF16), or why it is None though asked for; ""
    #: when it was predicted as usual or not asked for
    memory_note: str = ""
    #: what a zoo model was built as, where it kept builder defaults (:func:`prenet.zoo.defaults_note`); "" otherwise
    model_note: str = ""


def cache_dir() -> Path | None:
    """Where traces are stored (:func:`prenet.paths.user_store`); None when ``PRENET_TRACE_CACHE`` is ``off``."""
    from prenet.paths import user_store

    return user_store("traces")


def code_fingerprint() -> str:
    """SHA-256 over the source of every ``prenet`` module and torch's installed version, as they were when this module
    was imported (the code this process runs; :func:`job_trace` stores nothing once the files have changed since)."""
    return _FINGERPRINT


def _source_fingerprint() -> str:
    h = hashlib.sha256(f"format {FORMAT}; torch {_version('torch')}".encode())
    for f in sorted(_PACKAGE.rglob("*.py")):
        h.update(f.relative_to(_PACKAGE).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def storable(model: Any, zoo_kwargs: dict[str, Any] | None = None) -> bool:
    """Whether ``model`` is a spec whose trace may be stored: a name (a zoo model, ``torchvision:``, ``timm:`` or
    ``hf:``), not user code (``file.py:function``) or a module object, with plain size keywords."""
    named = isinstance(model, str) and (model.startswith(tuple(f"{lib}:" for lib in _BUILDERS)) or ":" not in model)
    return named and all(isinstance(v, (bool, int, float, str)) for v in (zoo_kwargs or {}).values())


def job_key(model: str, batch_size: int, zoo_kwargs: dict[str, Any] | None, **choices: Any) -> str:
    """The store key of one job: a hash of the spec, the contents of the config file an ``hf:`` spec names, the batch,
    the size keywords, ``choices`` (optimizer, precision, device type, ...) and :func:`code_fingerprint`."""
    named = Path(model[3:]) if model.startswith("hf:") else None
    content = hashlib.sha256(named.read_bytes()).hexdigest() if named is not None and named.is_file() else ""
    spec = {"model": model, "file": content, "batch_size": batch_size, "zoo_kwargs": zoo_kwargs or {}, **choices}
    for prefix, dists in _BUILDERS.items():  # built by a library: its version is part of the model
        if model.startswith(f"{prefix}:"):
            spec.update({d: _version(d) for d in dists})
    return hashlib.sha256((json.dumps(spec, sort_keys=True, default=str) + code_fingerprint()).encode()).hexdigest()[:40]


def load(key: str) -> dict[str, Any] | None:
    """The stored entry ``key``, or None (absent, unreadable or from another layout)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        entry = json.loads((d / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("format") == FORMAT else None


def store(key: str, entry: dict[str, Any]) -> None:
    """Write ``entry`` under ``key`` atomically; a store that cannot be written is skipped (the answer is unchanged)."""
    d = cache_dir()
    if d is None:
        return
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"format": FORMAT, **entry}))
        os.replace(tmp, d / f"{key}.json")
        tmp = None
    except (OSError, TypeError, ValueError):
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


_RECORD_FIELDS = [f.name for f in fields(OpRecord)]


def trace_to_dict(trace: StepTrace) -> dict[str, Any]:
    """``trace`` as JSON-ready columns (one list per :class:`OpRecord` field) plus its other fields."""
    head = {f.name: getattr(trace, f.name) for f in fields(StepTrace) if f.name != "records"}
    return {**head, "records": {c: [getattr(r, c) for r in trace.records] for c in _RECORD_FIELDS}}


def trace_from_dict(d: dict[str, Any]) -> StepTrace:
    """The inverse of :func:`trace_to_dict`."""
    cols = d["records"]
    records = [OpRecord(**dict(zip(_RECORD_FIELDS, row))) for row in zip(*(cols[c] for c in _RECORD_FIELDS))]
    return StepTrace(records=records, **{k: v for k, v in d.items() if k != "records"})


def memory_precision(precision: str, device_types: list[str]) -> dict[str, str]:
    """How a job's memory estimate is traced: its ``precision``, and for a 16-bit (autocast) step the device type whose
    op lists apply (CUDA's where the job has a GPU); {} for FP32 and TF32, which store FP32."""
    from prenet.names import AUTOCAST_PRECISIONS

    if precision not in AUTOCAST_PRECISIONS:
        return {}
    return {"precision": precision, "device_type": "cuda" if "cuda" in device_types else device_types[0]}


def job_trace(
    model: Any,
    batch_size: int,
    *,
    device_types: list[str],
    zoo_kwargs: dict[str, Any] | None = None,
    optimizer: str = "sgd",
    precision: str = "fp32",
    fused: bool = False,
    memory_format: str = "contiguous",
    grad_accum: int = 1,
    checkpointing: bool = False,
    with_memory: bool = True,
    threads: int = 1,
) -> JobTrace:
    """The job's traced step on each of ``device_types`` and its memory estimate: read from the store when every part is
    there, else traced now (torch imported here) and stored. ``model``: a spec (:func:`prenet.user_models.build_model`)
    or an ``(nn.Module, example_batch)`` pair (never stored). ``threads``: the CPU threads a ``cpu`` step runs on (part of
    its key: torch picks some CPU kernels by it)."""
    common = {"optimizer": optimizer, "grad_accum": grad_accum, "checkpointing": checkpointing}
    keys: dict[str, str] = {}
    if storable(model, zoo_kwargs):
        keys = {
            dt: job_key(
                model,
                batch_size,
                zoo_kwargs,
                **common,
                precision=precision,
                device_type=dt,
                fused=fused,
                memory_format=memory_format,
                **({"threads": threads} if dt == "cpu" else {}),
            )
            for dt in device_types
        }
        # also holds the checkpointed block count; a 16-bit step's activations follow its autocast lists
        keys["memory"] = job_key(model, batch_size, zoo_kwargs, **common, **memory_precision(precision, device_types))
        entries = {k: load(v) for k, v in keys.items()}
        mem = entries.pop("memory")
        if mem is not None and all(e is not None for e in entries.values()) and (mem.get("memory") or not with_memory):
            try:
                return JobTrace(
                    traces={dt: trace_from_dict(e["trace"]) for dt, e in entries.items()},
                    memory=MemoryEstimate(**mem["memory"]) if with_memory else None,
                    blocks=int(mem["blocks"]),
                    stored=True,
                    memory_note=str(mem.get("note", "")) if with_memory else "",
                    model_note=str(mem.get("model_note", "")),
                )
            except (KeyError, TypeError, ValueError):  # an entry of another shape: traced again and overwritten
                pass
    from prenet.memory.training import predict_memory_noted
    from prenet.ops.trace import trace_step
    from prenet.steptime.step import accumulate
    from prenet.user_models import build_model, rebatch

    module, batch = (model[0], rebatch(model[1], batch_size)) if isinstance(model, tuple) else build_model(str(model), batch_size, zoo_kwargs)
    from prenet.zoo import defaults_note

    model_note = ((defaults_note(model, zoo_kwargs) or getattr(module, "prenet_note", "")) if isinstance(model, str) else "") or ""
    blocks = 0
    if checkpointing:
        from prenet.checkpointing import checkpointed

        module, blocks = checkpointed(module)
    traces = {}
    for dt in device_types:
        t = trace_step(
            module, batch, optimizer=optimizer, precision=precision, device_type=dt, fused=fused, memory_format=memory_format, threads=threads
        )
        traces[dt] = accumulate(t, module, grad_accum)
    memory, memory_note = (
        predict_memory_noted(module, batch, optimizer, grad_accum, **memory_precision(precision, device_types)) if with_memory else (None, "")
    )
    if keys and _source_fingerprint() == _FINGERPRINT:  # prenet's files unchanged since this process imported them
        for dt, t in traces.items():
            store(keys[dt], {"trace": trace_to_dict(t)})
        if memory is not None or load(keys["memory"]) is None:  # never overwrite a stored estimate with none
            entry = {"memory": asdict(memory) if memory is not None else None, "blocks": blocks, "note": memory_note}
            store(keys["memory"], {**entry, "model_note": model_note})
    return JobTrace(traces=traces, memory=memory, blocks=blocks, memory_note=memory_note, model_note=model_note)


def job_notes(job: JobTrace) -> list[str]:
    """What an answer from ``job`` says about how it was traced: checkpointed blocks, and a trace read from the store."""
    notes = [job.model_note] if job.model_note else []
    if job.blocks:
        notes.append(f"activation checkpointing: {job.blocks} blocks recompute their forward in the backward pass and keep only their inputs")
    if job.memory_note:
        notes.append(job.memory_note)
    if job.stored:
        where = cache_dir()
        notes.append(f"the traced step was read from the trace store ({where}; PRENET_TRACE_CACHE=off traces it again)")
    return notes


_FINGERPRINT = _source_fingerprint()
