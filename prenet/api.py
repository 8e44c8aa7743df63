"""prenet's Python API.

    >>> from prenet.api import predict_step_time, predict_layers
    >>> p = predict_step_time("resnet18", batch_size=32, hardware="H100 SXM5 80GB", dataset_size=50_000)
    >>> p.step_seconds, p.epoch_seconds, p.family_share, p.top_ops[0]

``model`` is a zoo name (:data:`prenet.zoo.ZOO`), ``path/to/file.py:function`` or an ``(nn.Module,
example_batch)`` pair; ``hardware`` a catalog name, ``local``, a YAML spec path or a
:class:`~prenet.hardware.HardwareSpec`. Step times come from the op-level efficiency models of ``train_ops``
(``data/models/steptime_ops``), for whole models and for layer rows alike; the PreNeT-recipe regressors of ``train``
(``data/models/steptime``) are the measured baseline the ``evaluate`` stage compares against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from prenet.errors import PrenetError
from prenet.hardware import HardwareSpec, resolve
from prenet.paths import default_path
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.job_trace import job_notes, job_trace
from prenet.steptime.step import StepPrediction, device_type, predict_traced


def _hardware(hardware: str | HardwareSpec, threads: int) -> HardwareSpec:
    """``local`` is the benchmark stage's record of this CPU when it matches (``paths.hardware_record``), else its first
    measurement at ``threads``, stored (:func:`~prenet.hardware.local.stored_cpu`)."""
    if isinstance(hardware, HardwareSpec):
        return hardware
    return resolve(hardware, threads=threads, local_record=default_path("hardware_record"))


def predict_step_time(
    model: Any,
    *,
    batch_size: int,
    hardware: str | HardwareSpec = "local",
    optimizer: str = "sgd",
    precision: str = "fp32",
    dataset_size: int | None = None,
    threads: int = 1,
    models_dir: str | Path | None = None,
    overhead_ms: float | None = None,
    zoo_kwargs: dict[str, Any] | None = None,
    fused: bool = False,
    memory_format: str = "contiguous",
    grad_accum: int = 1,
    checkpointing: bool = False,
    with_memory: bool = False,
    gpus: int = 1,
    nodes: int = 1,
    parallel: str = "ddp",
    network_gbits: float | None = None,
    seq_len: int | None = None,
    host_speed: str | None = None,
) -> StepPrediction:
    """Predicted time of one training step (and of an epoch with ``dataset_size``) of ``model`` in ``precision``
    (fp32 | tf32 | fp16 | bf16), through the op-level path (:mod:`prenet.steptime.step`). ``overhead_ms`` None: the
    measured null step of the local CPU. ``fused``: the optimizer step as ``torch.optim.*(fused=True)`` runs it (one
    kernel); by default as torch's default runs it (foreach kernels on a GPU, per-tensor ops on a CPU).
    ``memory_format``: ``contiguous`` (NCHW, torch's default; FP16/BF16/TF32 convolutions on a GPU carry cuDNN's layout
    transposes) or ``channels_last`` (NHWC, ``model.to(memory_format=torch.channels_last)``). ``grad_accum``: K
    micro-steps of ``batch_size`` per optimizer step; the answer is per optimizer step. ``checkpointing``: each block
    of the model's repeated stack under ``torch.utils.checkpoint`` (:mod:`prenet.checkpointing`). ``with_memory``: also
    the step's predicted peak memory (``memory_bytes``). ``gpus`` per node × ``nodes``, ``parallel`` (``ddp`` |
    ``fsdp`` | ``tp:K``) and the node's ``network_gbits`` (Gb/s): the job on several GPUs (:mod:`prenet.parallel`);
    ``batch_size`` is per GPU, the answer's ``parallel`` holds compute and communication apart, and under FSDP
    ``memory_bytes`` is per GPU (DDP's gradient buckets, FSDP's shards, tensor parallelism's split blocks). ``model``: a name
    (a zoo model, ``torchvision:NAME``, ``timm:NAME``, ``hf:MODEL_TYPE``, ``hf:config.json``, ``path/to/file.py:function``)
    or ``(module, example_batch)``, whose batch is brought to ``batch_size`` samples. A named model's traced step is stored and read back
    (:mod:`prenet.steptime.job_trace`): a repeated question about the same job imports no torch. ``seq_len``: tokens per
    sample of a named text model (the CLI's ``--seq-len``; the same as ``zoo_kwargs={"seq_len": N}``). ``host_speed``: on
    this very CPU, ``now`` (the default, unless ``$PRENET_HOST_SPEED`` says otherwise) scales its answer to the speed the
    host has now against its op benchmark's (:mod:`prenet.host_speed`), ``recorded`` answers at the latter."""
    if seq_len is not None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise PrenetError(f"predict_step_time(seq_len={seq_len!r}): give a positive integer (tokens per sample)")
        if (zoo_kwargs or {}).get("seq_len", seq_len) != seq_len:
            raise PrenetError(f"predict_step_time: seq_len={seq_len} and zoo_kwargs seq_len={zoo_kwargs['seq_len']} disagree: give one")  # type: ignore[index]
        zoo_kwargs = {**(zoo_kwargs or {}), "seq_len": seq_len}
    if not isinstance(model, (str, tuple)):
        raise PrenetError(
            f"predict_step_time: model is a {type(model).__name__}; pass (module, example_batch) — the batch a tensor or "
            "(inputs, labels) — or a name: a zoo model, torchvision:NAME, timm:NAME, hf:MODEL_TYPE or path/to/file.py:function"
        )
    for name, value in (("batch_size", batch_size), ("grad_accum", grad_accum), ("gpus", gpus), ("nodes", nodes), ("threads", threads)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PrenetError(f"predict_step_time: {name} must be a positive integer, got {value!r}")
    hw = _hardware(hardware, threads)
    job = job_trace(
        model,
        batch_size,
        device_types=[device_type(hw)],
        zoo_kwargs=zoo_kwargs,
        optimizer=optimizer,
        precision=precision,
        fused=fused,
        memory_format=memory_format,
        grad_accum=grad_accum,
        checkpointing=checkpointing,
        with_memory=with_memory,
        threads=threads,
    )
    layout = None
    if gpus * nodes > 1 or parallel != "ddp":
        from prenet.parallel.data_parallel import Layout, parse_parallel

        strategy, tp = parse_parallel(parallel)
        layout = Layout(gpus=gpus, nodes=nodes, strategy=strategy, tp=tp, network_gbits=network_gbits)
    trace = job.traces[device_type(hw)]
    op_models = EfficiencyModel.load(default_path("models_ops", models_dir))
    op_models.at_host_speed(hw, host_speed)
    if layout is None:
        pred = predict_traced(trace, hw, op_models, overhead_ms=overhead_ms, dataset_size=dataset_size)
    else:
        from prenet.parallel.answer import predict_parallel

        pred = predict_parallel(trace, hw, op_models, layout, overhead_ms=overhead_ms, dataset_size=dataset_size)
    pred.notes[:0] = job_notes(job)
    if gpus * nodes == 1 and parallel != "ddp":
        pred.notes.append(f"--parallel {parallel} on one GPU shares nothing: this is the single-GPU step (give --gpus N)")
    if network_gbits is not None and nodes == 1:
        pred.notes.append(f"the network ({network_gbits:g} Gb/s) joins nodes; one node uses none of it (give --nodes M)")
    pred.memory_bytes = job.memory.total_bytes if job.memory is not None else None
    pred.memory = job.memory.to_dict() if job.memory is not None else None
    if job.memory is not None and layout is not None and layout.strategy == "fsdp" and layout.world > 1:
        from prenet.parallel.data_parallel import fsdp_units
        from prenet.parallel.memory import fsdp_memory_bytes

        m = job.memory
        pred.memory_bytes = fsdp_memory_bytes(
            m.total_bytes, m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, layout.world, fsdp_units(trace.grad_params)
        )
    if job.memory is not None and layout is not None and layout.strategy == "ddp" and layout.world > 1:
        from prenet.parallel.memory import ddp_memory_bytes

        pred.memory_bytes = ddp_memory_bytes(job.memory.total_bytes, job.memory.gradients_bytes)
    if job.memory is not None and layout is not None and layout.strategy == "tp":
        from prenet.parallel.tensor_parallel import tp_memory_bytes

        m = job.memory
        pred.memory_bytes = tp_memory_bytes(
            m.total_bytes, m.weights_bytes + m.gradients_bytes + m.optimizer_bytes, trace.grad_params, trace.blocks, layout.tp
        )
    if pred.parallel is not None:
        pred.parallel["memory_bytes_per_gpu"] = pred.memory_bytes
    return pred


def predict_layers(
    table: pl.DataFrame,
    *,
    hardware: str | HardwareSpec,
    threads: int = 1,
    models_dir: str | Path | None = None,
    host_speed: str | None = None,
) -> pl.DataFrame:
    """``table`` (the ``prenet predict layers`` CSV format) plus ``predicted_ms``, through the op-level path
    (``models_dir`` default: ``paths.models_ops``, read when called); ``host_speed`` as :func:`predict_step_time`'s (one
    process answers one op the same in both)."""
    from prenet.steptime.layer_table import predict_layers as _predict_layers

    return _predict_layers(
        table, hardware=_hardware(hardware, threads), model=default_path("models_ops", models_dir), threads=threads, host_speed=host_speed
    )
