"""The plan itself: what a training job costs on each hardware option — step time × steps × price per hour.

For every hardware option the plan holds

* the predicted time of one training step (s): the step-time predictor (PreNeT: the model walked into layers,
  each layer predicted on that hardware's spec sheet, summed);
* the steps: given (``steps``, or ``epochs`` × ⌈dataset / batch⌉) or forecast by the convergence predictor
  (Zancato et al.: linearized fine-tuning dynamics from the empirical NTK, no training);
* wall time = step time × steps (s); cost = wall time × price per hour (USD, ``conf/pricing/``);
* predicted peak training memory (``prenet.memory.training``) and whether it fits the device.

**Intervals.** Each time and cost comes with an interval from the predictors' measured errors on held-out data
(the typed records that ``evaluate``, ``evaluate_ops`` and ``evaluate_convergence`` write in ``paths.intervals``):

* step time on the local CPU: the ratios measured / predicted of every whole zoo training step;
* step time on a GPU: the deciles of measured / predicted per layer on each GPU held out of training in the
  leave-one-GPU-out evaluation (the GPU predicted from its spec sheet alone), pooled over the held-out GPUs —
  whole-model GPU steps have no ground truth here, so layer errors stand in for them;
* steps from a forecast: the ratios real / forecast steps of the holdout fine-tuning configurations for that kind
  of target (relative ε, loss, accuracy); given steps are exact.

The interval of wall time (and cost) is the central ``coverage`` share (default 80 %: 10th–90th percentile) of
every product r_time × r_steps of the two sets of ratios — i.e. the two errors are treated as independent — times
the point prediction. It describes the errors measured so far; it is not a guarantee for models unlike the zoo.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prenet.errors import PrenetError, first_line
from prenet.hardware.spec import HardwareSpec
from prenet.memory.estimate import GIB, GPU_RESERVE_GIB, MemoryEstimate, fit_advice, fits
from prenet.names import OPTIMIZERS
from prenet.planner.intervals import DRIFT_EDGES, Intervals, load_intervals, steps_interval


@dataclass
class PlanRow:
    """One hardware option: times in seconds, cost in USD, memory in bytes; ``*_low``/``*_high`` bound the interval."""

    hardware: str
    kind: str
    step_seconds: float
    step_low: float
    step_high: float
    wall_seconds: float
    wall_low: float
    wall_high: float
    usd_per_hour: float | None
    cost_usd: float | None
    cost_low: float | None
    cost_high: float | None
    device_memory_gib: float | None
    fits: bool | None  # None: the device's memory is unknown
    fits_upper: bool | None  # also at the largest measured memory under-prediction
    price_source: str | None = None
    family_share: dict[str, float] = field(default_factory=dict)  # share of the predicted step per op family
    steps: int = 0  # optimizer steps of this option (an epoch is split over a multi-GPU option's data-parallel GPUs)
    gpus: int = 1  # GPUs per node of this option (its price counts them all)
    nodes: int = 1
    device: str = ""  # the catalog name of one device ('' : ``hardware``)
    parallel: dict[str, Any] | None = None  # a multi-GPU option's step (:class:`prenet.parallel.data_parallel.ParallelStep`)
    memory_bytes: int = 0  # predicted peak training memory of one device of this option (bytes)


@dataclass
class Plan:
    """A training job on every hardware option (see the module docstring for the method)."""

    model: str
    batch_size: int
    optimizer: str
    dataset_size: int | None
    steps: int
    steps_low: int
    steps_high: int
    steps_from: str  # "steps" | "epochs" | "forecast"
    memory: MemoryEstimate
    coverage: float
    rows: list[PlanRow] = field(default_factory=list)
    forecast: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    precision: str = "fp32"
    input_shape: list[int] = field(default_factory=list)
    params: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["memory"] = self.memory.to_dict()
        return d

    def sorted(self, by: str = "cost") -> list[PlanRow]:
        """Rows ranked by ``cost`` (unpriced last, by time), ``time`` or ``name``; rows that do not fit go last."""
        if by not in ("cost", "time", "name"):
            raise PrenetError(f"--sort must be cost, time or name, got {by!r}")

        def key(r: PlanRow):
            fit = 1 if r.fits is False else 0
            if by == "name":
                return (fit, r.hardware.lower())
            if by == "time":
                return (fit, r.wall_seconds)
            return (fit, r.cost_usd is None, r.cost_usd if r.cost_usd is not None else 0.0, r.wall_seconds)

        return sorted(self.rows, key=key)


def host_memory_gib() -> float | None:
    """This machine's physical memory (GiB), for the ``local`` hardware."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None


def interval_side_note(intervals: Intervals, kind: str) -> str | None:
    """Where the step-time interval of ``kind`` hardware lies wholly on one side of the estimate, why (the measured steps
    behind it all ran slower, or all faster, than predicted), so an estimate outside its own interval reads as meant."""
    lo, hi = intervals.bounds(kind, with_steps=False)
    if lo <= 1.0 <= hi:
        return None
    side = "slower" if lo > 1.0 else "faster"
    where = "this CPU's zoo steps" if kind == "cpu" else "the GPU ops held out of training"
    return (
        f"{kind} step-time interval: {where} ran {100 * abs(lo - 1):.0f}-{100 * abs(hi - 1):.0f} % {side} than predicted "
        f"(the central {100 * intervals.coverage:.0f} % of measured / predicted), so the interval lies {'above' if lo > 1 else 'below'} "
        "the estimate: the estimate is the model's, the interval what measurement adds"
    )


def plan_rows(
    step_seconds: dict[str, float],
    specs: dict[str, HardwareSpec],
    *,
    steps: int,
    memory: MemoryEstimate,
    intervals: Intervals,
    prices: dict[str, dict[str, Any]],
    family_share: dict[str, dict[str, float]] | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> list[PlanRow]:
    """One row per hardware option from its predicted step time (s). ``options``: per multi-GPU option, its
    ``device`` (catalog name), ``gpus``, ``nodes``, ``steps`` (its own count: an epoch is shared by its GPUs) and
    ``parallel`` step; its price is the device's times its GPUs. Memory is per device (DDP replicates the step)."""
    lower_prices = {k.lower(): v for k, v in prices.items()}
    rows = []
    for name, step_s in step_seconds.items():
        spec = specs[name]
        opt = (options or {}).get(name, {})
        n_dev = int(opt.get("gpus", 1)) * int(opt.get("nodes", 1))
        device = opt.get("device", name)
        lo, hi = intervals.bounds(spec.kind)
        slo, shi = intervals.bounds(spec.kind, with_steps=False)
        n_steps = int(opt.get("steps", steps))
        wall = step_s * n_steps
        price = lower_prices.get(device.lower()) or lower_prices.get(spec.hardware_id.lower())
        usd = price["usd_per_hour"] * n_dev if price else None
        mem_gib = spec.mem_gb if spec.kind == "gpu" else host_memory_gib()
        reserve = GPU_RESERVE_GIB if spec.kind == "gpu" else 0.0
        ratio = max(intervals.memory_ratio_max or 1.0, 1.0)
        mem = opt.get("memory_bytes", memory.total_bytes)
        rows.append(
            PlanRow(
                hardware=name,
                kind=spec.kind,
                step_seconds=step_s,
                step_low=step_s * slo,
                step_high=step_s * shi,
                wall_seconds=wall,
                wall_low=wall * lo,
                wall_high=wall * hi,
                usd_per_hour=usd,
                cost_usd=wall / 3600 * usd if usd is not None else None,
                cost_low=wall * lo / 3600 * usd if usd is not None else None,
                cost_high=wall * hi / 3600 * usd if usd is not None else None,
                device_memory_gib=mem_gib,
                fits=fits(mem, mem_gib, reserve),
                fits_upper=fits(mem * ratio, mem_gib, reserve),
                price_source=price.get("source") if price else None,
                family_share=(family_share or {}).get(name, {}),
                steps=n_steps,
                gpus=int(opt.get("gpus", 1)),
                nodes=int(opt.get("nodes", 1)),
                device=device,
                parallel=opt.get("parallel"),
                memory_bytes=int(mem),
            )
        )
    return rows


def _multi_gpu_options(
    name: str,
    spec: HardwareSpec,
    pred: Any,
    ops: Any,
    trace: Any,
    op_model: Any,
    memory: MemoryEstimate,
    gpus: Sequence[int],
    nodes: int,
    parallel: str,
    network_gbits: float | None,
    notes: list[str],
) -> dict[str, dict[str, Any]]:
    """The multi-GPU options of GPU ``name`` (one per count of ``gpus`` its node holds, on ``nodes`` nodes): their
    label → {step_s, device, gpus, nodes, replicas, parallel, memory_bytes}."""
    from prenet.parallel.answer import layout_step, load_model
    from prenet.parallel.data_parallel import Layout, fsdp_units, parse_parallel
    from prenet.parallel.interconnect import interconnect
    from prenet.parallel.memory import ddp_memory_bytes, fsdp_memory_bytes
    from prenet.parallel.tensor_parallel import tp_memory_bytes

    strategy, tp = parse_parallel(parallel)
    ic = interconnect(spec)
    pm = load_model()
    out: dict[str, dict[str, Any]] = {}
    for g in sorted(set(gpus)):
        if g * nodes == 1:
            continue
        if g > ic.gpus_per_node:
            notes.append(f"{g} GPUs of {name}: not planned, a node holds at most {ic.gpus_per_node} (use --nodes)")
            continue
        if strategy == "tp" and g % tp:
            note = f"{g} GPUs per node: not planned, tp:{tp} needs a multiple of {tp} GPUs in a node"
            if note not in notes:
                notes.append(note)
            continue
        layout = Layout(gpus=g, nodes=nodes, strategy=strategy, tp=tp, network_gbits=network_gbits)
        step = layout_step(pred, ops, trace, spec, layout, op_model, pm)
        for note in step.notes:
            if note not in notes and not note.startswith("GPUs joined by"):
                notes.append(note)
        label = f"{g}× {name}" if nodes == 1 else f"{nodes}×{g}× {name}"
        if not any(n.startswith("multi-GPU options:") for n in notes):
            notes.append(
                "multi-GPU options: their intervals are the one-GPU step's measured errors (the scaling check's are in "
                "evaluate_parallel), their family shares one GPU's compute"
            )
        mem = ddp_memory_bytes(memory.total_bytes, memory.gradients_bytes)
        if strategy == "fsdp":
            mem = fsdp_memory_bytes(
                memory.total_bytes, memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes, layout.world, fsdp_units(trace.grad_params)
            )
        if strategy == "tp":
            states = memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes
            mem = tp_memory_bytes(memory.total_bytes, states, trace.grad_params, trace.blocks, tp)
        out[label] = {
            "step_s": step.step_ms / 1e3,
            "device": name,
            "gpus": g,
            "nodes": nodes,
            "replicas": layout.data_parallel,
            "parallel": step.to_dict(),
            "memory_bytes": mem,
        }
    return out


TARGETS = ("converge_eps", "target_loss", "target_accuracy")


def load_finetune_data(path: str | Path) -> tuple[Any, Any]:
    """(inputs, integer labels) of a fine-tuning set: a ``.pt`` file holding ``{"inputs": tensor, "labels": tensor}``
    (``torch.save``; read with ``weights_only=True``) or an ``.npz`` file with arrays ``inputs`` and ``labels``."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise PrenetError(
            f"fine-tuning data {p} does not exist (a .pt file of {{'inputs': tensor, 'labels': tensor}} or an .npz with inputs, labels)"
        )
    try:
        if p.suffix == ".npz":
            with np.load(p) as z:
                raw = {k: z[k] for k in z.files}
        else:
            raw = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file becomes one message
        first = first_line(e)  # torch's unpickling errors run to paragraphs
        raise PrenetError(
            f"fine-tuning data {p} is not readable: {type(e).__name__}: {first} (give a .pt file of torch.save({{'inputs': tensor, "
            "'labels': tensor}) or an .npz with arrays inputs, labels)"
        ) from e
    if not isinstance(raw, dict) or not {"inputs", "labels"} <= set(raw):
        raise PrenetError(
            f"fine-tuning data {p} must hold 'inputs' and 'labels' (found: {', '.join(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__})"
        )
    x = torch.as_tensor(raw["inputs"]).float()
    y = torch.as_tensor(raw["labels"])
    if y.is_floating_point() or y.dim() != 1 or len(y) != len(x) or len(x) < 2:
        raise PrenetError(
            f"fine-tuning data {p}: labels must be one integer class per input ({len(x)} inputs, labels of shape {tuple(y.shape)} and dtype {y.dtype})"
        )
    return x, y.long()


def forecast_steps(
    module: Any,
    inputs: Any,
    labels: Any,
    *,
    target: str,
    value: float,
    loss: str,
    lr: float,
    momentum: float,
    batch_size: int,
    max_steps: int,
    subset: int | None,
    seed: int = 0,
    max_gib: float = 4.0,
) -> dict[str, Any]:
    """Steps of SGD fine-tuning of ``module`` on (``inputs``, ``labels``) to reach ``target`` (``converge_eps``:
    |L_t − L_T| ≤ ε (L_0 − L_T); ``target_loss``: L_t ≤ τ; ``target_accuracy``: training accuracy ≥ a), forecast
    from the NTK (the default forecast: the kernel followed along the forecast's own trajectory). Raises
    :class:`PrenetError` when the forecast does not reach the target within ``max_steps``. A loss or accuracy target
    reached early in the horizon is forecast again at twice its answer (:func:`prenet.convergence.forecaster.refined`;
    ``horizons`` records each pass): the answer then depends on the target, not on ``max_steps``. (``converge_eps`` is
    defined against the horizon's own last loss, so it is answered at ``max_steps``.)"""
    from prenet.convergence import forecast
    from prenet.convergence.forecaster import refined
    from prenet.convergence.ntk import ProblemTooLargeError

    if target not in TARGETS:
        raise PrenetError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    from prenet.convergence.targets import OPTION_KIND, check_target

    check_target(OPTION_KIND[target], value)

    passes: list[float] = []  # seconds of every forecast pass

    def run(horizon: int) -> tuple[Any, int | None]:
        try:
            fc = forecast(
                module,
                inputs,
                labels,
                loss=loss,
                lr=lr,
                momentum=momentum,
                batch_size=batch_size,
                steps=horizon,
                seed=seed,
                subset=None if subset is None else min(subset, len(inputs)),
                max_bytes=int(max_gib * GIB),
                warn_dearer=False,  # the plan reports the forecast's cost
            )
        except ProblemTooLargeError as e:
            raise PrenetError(str(e)) from e
        passes.append(fc.seconds)
        b = fc.best()
        at = {"converge_eps": b.steps_to_converge, "target_loss": b.steps_to_loss, "target_accuracy": b.steps_to_accuracy}[target](value)
        return fc, at

    if target == "converge_eps":
        fc, steps = run(max_steps)
        horizons: list[tuple[int, int | None]] = [(max_steps, steps)]
    else:
        fc, steps, horizons = refined(run, max_steps)
    seconds = float(sum(passes))
    best = fc.best()
    final_loss, final_acc = float(best.loss[-1]), (float(best.accuracy[-1]) if best.accuracy is not None else None)
    if steps is None or (target == "converge_eps" and steps >= max_steps):
        what = {
            "converge_eps": f"converge to within ε = {value} of its final loss",
            "target_loss": f"reach loss ≤ {value}",
            "target_accuracy": f"reach training accuracy ≥ {value}",
        }[target]
        acc = f", accuracy {final_acc:.3f}" if final_acc is not None else ""
        raise PrenetError(
            f"the forecast does not {what} within {max_steps:,} steps (predicted loss at step {max_steps:,}: {final_loss:.4g}{acc}); "
            f"raise --max-steps, relax the target, or change --lr (now {lr})"
        )
    return {
        "steps": int(steps),
        "target": target,
        "value": value,
        "loss": loss,
        "lr": lr,
        "momentum": momentum,
        "n_train": int(len(inputs)),
        "n_used": fc.n_used,
        "dynamics": fc.dynamics,
        "ntk": fc.ntk_method,
        "seconds": seconds,
        "horizons": horizons,
        "drift": fc.drift,
        "reliable": fc.reliable,
        "followed": fc.variant == "relinearized",  # the kernel re-linearized along the forecast (else it moved after the checks)
        "answered_by": "corrected" if fc.variant == "corrected" else "default",
        "max_steps": max_steps,
        "cost": _cost_over(fc.details.get("cost"), seconds),
        "skipped": sorted({r["skipped"] for r in fc.details.get("relinearized") or [] if r.get("skipped")}),
    }


def _cost_over(cost: dict | None, seconds: float) -> dict | None:
    """A forecast's ``cost`` record with its ratio taken over ``seconds`` (every pass of :func:`forecast_steps`)."""
    if not cost:
        return cost
    ratio = float(cost["train_seconds_estimate"]) / seconds if seconds > 0 else float("inf")
    return {**cost, "ratio_estimate": ratio, "met": ratio >= float(cost["target"])}


def steps_target_key(target: str, value: float) -> str:
    """The convergence evaluation's metrics key whose measured errors apply to ``target`` (closest measured kind)."""
    return {"converge_eps": "relative_eps=0.1", "target_loss": "loss<=0.5*L0", "target_accuracy": "accuracy>=0.9"}[target]


def _module_for_forecast(model: Any, batch_size: int, zoo_kwargs: dict[str, Any] | None) -> Any:
    """The model with real weights (the forecast needs them): a zoo model freshly initialised, a file model as built."""
    import torch

    from prenet.user_models import build_model

    if isinstance(model, tuple):
        return model[0]
    torch.manual_seed(0)
    return build_model(str(model), batch_size, zoo_kwargs, meta=False)[0]


def make_plan(
    model: Any,
    *,
    batch_size: int,
    dataset_size: int | None = None,
    epochs: float | None = None,
    steps: int | None = None,
    target: str | None = None,
    target_value: float | None = None,
    finetune: dict[str, Any] | None = None,
    hardware: list[str] | None = None,
    optimizer: str = "sgd",
    fused: bool = False,
    memory_format: str = "contiguous",
    grad_accum: int = 1,
    checkpointing: bool = False,
    momentum: float = 0.0,
    prices: dict[str, dict[str, Any]] | None = None,
    models_dir: str | Path,
    intervals_dir: str | Path,
    threads: int = 1,
    overhead_path: str | Path | None = None,
    zoo_kwargs: dict[str, Any] | None = None,
    precision: str = "fp32",
    local_record: str | Path | None = None,
    gpus: Sequence[int] = (1,),
    nodes: int = 1,
    parallel: str = "ddp",
    network_gbits: float | None = None,
) -> Plan:
    """Plan a training job of ``model`` (zoo name, ``file.py:function`` or ``(module, example_batch)``) on every
    hardware in the catalog plus ``local`` (or the ``hardware`` list). Exactly one of ``steps``, ``epochs`` (with
    ``dataset_size``) or ``target`` (``converge_eps`` | ``target_loss`` | ``target_accuracy``, with ``target_value``
    and ``finetune`` = {inputs, labels, loss, lr, max_steps, subset}) sets the number of steps. ``zoo_kwargs``: a
    zoo model's size keywords (e.g. ``{"image_size": 224}``; the zoo's defaults are CPU-sized). Step times come from the one
    step-time path (:mod:`prenet.steptime.step`) in ``precision``; a hardware without that unit gets a note, not a row.
    ``fused``: the optimizer step as ``torch.optim.*(fused=True)`` runs it (one kernel), else as torch's default does;
    ``memory_format``: the 4-D tensors' layout, contiguous (NCHW) or channels_last (NHWC); ``grad_accum``: K
    micro-steps of ``batch_size`` per optimizer step (a step is an optimizer step: epochs count ``batch_size``·K samples
    per step, the forecast runs at that batch); ``checkpointing``: activation checkpointing of the model's repeated
    blocks (:mod:`prenet.checkpointing`), in the step time and the memory fit.
    ``local_record``: the benchmark stage's record of this CPU (when it does not match, ``local`` is this CPU's first
    measurement at ``threads``, stored: :func:`~prenet.hardware.local.stored_cpu`).
    ``gpus``: the GPU counts per node planned for every GPU (e.g. 1, 2, 4, 8; a count above what its node holds is
    left out), on ``nodes`` nodes of ``network_gbits`` Gb/s each, shared as ``parallel`` (ddp | fsdp | tp:K; batch per
    GPU, per tp:K group under tensor parallelism; tp:K plans the counts K divides);
    an epoch is split over the data-parallel GPUs; a forecast's steps hold for one GPU's batch only."""

    from prenet.hardware import catalog, resolve
    from prenet.hardware.catalog import alias_note
    from prenet.steptime.efficiency import EfficiencyModel, UnsupportedPrecisionError, peaks
    from prenet.steptime.job_trace import job_notes, job_trace
    from prenet.steptime.step import CUDNN_TF32_DEFAULT, answered_overhead_ms, device_type, predict_trace_many, tf32_default_ops

    if batch_size < 1:
        raise PrenetError(f"--batch-size must be a positive integer, got {batch_size}")
    if grad_accum < 1:
        raise PrenetError(f"--grad-accum must be a positive integer, got {grad_accum}")
    given = [k for k, v in (("steps", steps), ("epochs", epochs), ("target", target)) if v is not None]
    if len(given) != 1:
        raise PrenetError(
            "give exactly one of --steps N, --epochs N (with --dataset-size) or a convergence target "
            f"(--converge-eps, --target-loss, --target-accuracy with --finetune-data); got {', '.join(given) or 'none'}"
        )
    if dataset_size is not None and dataset_size < 1:
        raise PrenetError(f"--dataset-size must be a positive integer, got {dataset_size}")
    if epochs is not None and dataset_size is None:
        raise PrenetError("--epochs needs --dataset-size (samples per epoch)")
    if optimizer not in OPTIMIZERS:
        raise PrenetError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    names = list(hardware) if hardware else ["local", *sorted(catalog())]
    from prenet.hardware.local import recorded_cpu

    recorded = recorded_cpu(local_record, threads) if "local" in names else None  # read once: the spec and the note
    specs = {n: recorded or resolve(n, threads=threads) if n == "local" else resolve(n, threads=threads) for n in names}  # unknown names fail here
    # a spec file's row is named as the file names its device, not by the file's path (unless two would share a name)
    named = {(s.hardware_id if n.endswith((".yaml", ".yml")) else n): s for n, s in specs.items()}
    specs = named if len(named) == len(specs) else specs
    alias_notes = [note for n in (hardware or []) if (note := alias_note(n))]
    step_optimizer = "momentum" if optimizer == "sgd" and momentum > 0 else optimizer  # SGD with --momentum: its buffers and update
    by_device: dict[str, list[str]] = {}
    for n, spec in specs.items():
        by_device.setdefault(device_type(spec), []).append(n)
    # one trace per device type (tf32 exists on NVIDIA GPUs only), stored for the next question about this job
    job = job_trace(
        model,
        batch_size,
        device_types=[dt for dt in by_device if not (precision == "tf32" and dt == "cpu")],
        zoo_kwargs=zoo_kwargs,
        optimizer=step_optimizer,
        precision=precision,
        fused=fused,
        memory_format=memory_format,
        grad_accum=grad_accum,
        checkpointing=checkpointing,
        threads=threads,
    )
    memory = job.memory
    if memory is None:
        raise PrenetError(f"{job.memory_note}; a plan needs it to say what fits")
    label = type(model[0]).__name__ if isinstance(model, tuple) else str(model)
    if zoo_kwargs:
        label += " (" + ", ".join(f"{k}={v}" for k, v in zoo_kwargs.items()) + ")"
    fc_info = None
    notes: list[str] = list(alias_notes)
    if "local" in specs and recorded is None:
        notes.append(
            f"local: no benchmark record of this CPU at {threads} thread(s) ({local_record or 'none given'}): its peaks and "
            + (
                f"bandwidth are its first measurement here ({at}, stored for the next answers)"
                if (at := specs["local"].extra.get("measured_at"))
                else "bandwidth were measured now"
            )
            + ", and its step times extrapolate from the CPU the op models were trained on"
        )
    op_model = EfficiencyModel.load(models_dir)  # what every plan needs is read before any forecast runs: a missing file fails fast
    if target is not None:
        if target_value is None or not finetune:
            raise PrenetError("a convergence target needs its value and --finetune-data (the fine-tuning set the forecast runs on)")
        key = steps_target_key(target, float(target_value))
        load_intervals(intervals_dir, steps_target=key)  # a missing or stale record fails before the forecast runs

        fmod = _module_for_forecast(model, batch_size, zoo_kwargs)
        fc_info = forecast_steps(
            fmod,
            finetune["inputs"],
            finetune["labels"],
            target=target,
            value=float(target_value),
            loss=finetune.get("loss", "cross_entropy"),
            lr=float(finetune["lr"]),
            momentum=momentum,
            batch_size=batch_size * grad_accum,
            max_steps=int(finetune.get("max_steps", 2000)),
            subset=None if finetune.get("subset") is None else int(finetune["subset"]),
            max_gib=float(finetune.get("max_gib", 4.0)),
        )
        n_steps, steps_from = fc_info["steps"], "forecast"
        dataset_size = dataset_size or fc_info["n_train"]
        # the interval of the variant that answered, widened to its drift band's measured errors where those are wider
        iv = load_intervals(intervals_dir, steps_target=key, steps_source=fc_info["answered_by"], drift=fc_info["drift"])
        if len(fc_info["horizons"]) > 1:
            from prenet.convergence.forecaster import passes_text

            notes.append(
                "the target came early in the forecast's horizon, and its re-linearization points are fractions of the horizon: "
                "forecast again at twice each answer (" + passes_text(fc_info["horizons"]) + ")"
            )
        if fc_info["reliable"] is False:
            notes.append(
                f"the forecast's kernel drifted ({fc_info['drift']:.2f} > 0.1): "
                + (
                    "the forecast followed it"
                    if fc_info["followed"]
                    else "it moved after the forecast's last drift check, which did not follow it there: the steps are uncertain"
                )
                + (
                    "; far from its linearization (drift ≥ 1: a new head, new classes or a large lr) forecasts err more widely, "
                    "and the steps interval is that of the measured forecasts that drifted as far"
                    if fc_info["drift"] >= DRIFT_EDGES[1]
                    else ""
                )
            )
        elif fc_info["reliable"] is None:
            notes.append(
                "the forecast did not check whether its kernel moves (every re-linearization was skipped: "
                + ", ".join(fc_info["skipped"] or ["none scheduled"])
                + "): the static kernel answers, which out of regime (new classes, a large lr) can be far off"
            )
        if fc_info["skipped"] and fc_info["reliable"] is not None:  # some, not all: decided by this machine's timings
            notes.append(
                "some re-linearizations were skipped ("
                + ", ".join(fc_info["skipped"])
                + "), a decision taken from this machine's timings: on a busier or slower host the same question can answer "
                "differently (give --max-steps near the target to keep them)"
            )
        if (cost := fc_info.get("cost")) and not cost.get("met", True):
            r = float(cost["ratio_estimate"])
            notes.append(
                f"the forecast was {r:.1f}× cheaper than the fine-tune it predicts (target {cost['target']:g}×)"
                if r >= 1
                else f"the forecast cost {1 / max(r, 1e-9):.1f}× the fine-tune it predicts: at this size, running the fine-tune answers sooner"
            )
    else:
        iv = load_intervals(intervals_dir)
        if steps is not None:
            if steps < 1:
                raise PrenetError(f"--steps must be a positive integer, got {steps}")
            n_steps, steps_from = int(steps), "steps"
        else:
            if epochs <= 0:
                raise PrenetError(f"--epochs must be positive, got {epochs}")
            n_steps, steps_from = int(math.ceil(float(epochs) * math.ceil(dataset_size / (batch_size * grad_accum)))), "epochs"
    step_s, shares = {}, {}
    options: dict[str, dict[str, Any]] = {}
    specs_multi: dict[str, HardwareSpec] = {}
    if steps_from == "forecast" and (max(gpus) > 1 or nodes > 1):
        notes.append("multi-GPU options are not planned with a convergence forecast: its steps hold for one GPU's batch")
        gpus, nodes = (1,), 1
    traces: dict[str, Any] = {}
    frames: dict[str, Any] = {}
    host_bound: dict[str, float] = {}  # GPUs whose step waits on the host issuing its ops: name -> issue time (ms)
    for dt, group in by_device.items():  # one trace per device type, one batched prediction over its hardware
        if precision == "tf32" and dt == "cpu":
            notes.extend(f"{n}: not planned: tf32 exists on NVIDIA GPUs only" for n in group)
            continue
        traces[dt] = job.traces[dt]
        frames[dt] = traces[dt].frame()
        runnable = []
        for n in group:
            try:
                peaks(frames[dt], specs[n])
                runnable.append(n)
            except UnsupportedPrecisionError:
                notes.append(f"{n}: not planned, no {precision} unit in its spec sheet")
        for n in runnable:  # this very CPU: at its speed now (prenet.host_speed), said in the plan
            if (speed := op_model.at_host_speed(specs[n])) is not None:
                notes.append(f"{n}: {speed.note()}")
        overheads = [answered_overhead_ms(specs[n], optimizer, op_model, overhead_path) for n in runnable]
        on_tf32: list[str] = []
        for n, (pred, ops) in zip(runnable, predict_trace_many(traces[dt], [specs[n] for n in runnable], op_model, overhead_ms=overheads)):
            if tf32_default_ops(traces[dt], ops):
                on_tf32.append(n)
            if pred.host_bound:
                host_bound[n] = pred.host_issue_ms
            if 1 in gpus and nodes == 1 or specs[n].kind != "gpu":
                step_s[n] = pred.step_seconds
                shares[n] = {k: round(v, 4) for k, v in pred.family_share.items()}
            if specs[n].kind == "gpu" and (max(gpus) > 1 or nodes > 1):
                for name, opt in _multi_gpu_options(
                    n, specs[n], pred, ops, traces[dt], op_model, memory, gpus, nodes, parallel, network_gbits, notes
                ).items():
                    step_s[name], shares[name], options[name], specs_multi[name] = (
                        opt.pop("step_s"),
                        {k: round(v, 4) for k, v in pred.family_share.items()},
                        opt,
                        specs[n],
                    )
        if on_tf32:
            notes.append(
                f"fp32 as torch runs it by default: on {', '.join(on_tf32)} (TF32 units) the cuDNN convolutions run {CUDNN_TF32_DEFAULT}, "
                "GEMMs in IEEE FP32; a job that turns it off is slower there"
            )
    if host_bound:
        names = sorted(host_bound, key=host_bound.get)
        notes.append(
            f"host-bound on {', '.join(names)}: the host issues the step's ops in {min(host_bound.values()):.1f} ms "
            f"(PyTorch eager, a cost per op fitted on measured steps), longer than the GPU works, so a faster GPU gains "
            "little; a larger batch, CUDA graphs or torch.compile would hide it"
        )
    notes += job_notes(job)
    if grad_accum > 1:
        notes.append(
            f"gradient accumulation: {grad_accum} micro-steps of {batch_size} per optimizer step (effective batch {grad_accum * batch_size})"
        )
    if not step_s:
        raise PrenetError(f"no hardware considered runs {precision}: " + "; ".join(notes[:3]))
    specs = {n: specs.get(n) or specs_multi[n] for n in step_s}
    for opt in options.values():
        if steps_from == "epochs":
            opt["steps"] = int(math.ceil(float(epochs) * math.ceil(dataset_size / (batch_size * grad_accum * opt["replicas"]))))
        elif steps_from == "steps":  # the same samples: N steps of one GPU's batch are N / R steps of R replicas' batches
            opt["steps"] = int(math.ceil(n_steps / opt["replicas"]))
    if steps_from == "steps" and any(opt["replicas"] > 1 for opt in options.values()):
        notes.append(
            f"--steps {n_steps} counts steps of one GPU's batch ({batch_size * grad_accum} samples): an option of R data-parallel "
            f"replicas runs {n_steps}/R steps of R × {batch_size * grad_accum}, the same samples, so every option does the same job"
        )
    rows = plan_rows(step_s, specs, steps=n_steps, memory=memory, intervals=iv, prices=prices or {}, family_share=shares, options=options)
    for kind in sorted({r.kind for r in rows}):
        if note := interval_side_note(iv, kind):
            notes.append(note)
    known = [r for r in rows if r.fits is not None]
    if known and not any(r.fits for r in known):
        biggest = max(known, key=lambda r: r.device_memory_gib or 0)
        raise PrenetError(
            f"batch size {batch_size} does not fit: a training step needs about {memory.total_bytes / GIB:.1f} GiB "
            f"(activations {memory.activations_bytes / GIB:.1f} GiB) and the largest device "
            f"considered, {biggest.hardware}, has {biggest.device_memory_gib:g} GiB; "
            + fit_advice(
                memory,
                biggest.device_memory_gib,
                batch_size=batch_size,
                checkpointing=checkpointing,
                precision=precision,
                low_precisions=specs[biggest.hardware].autocast_precisions(),
            )
        )
    lo, hi = steps_interval(n_steps, iv)
    trace = next(iter(traces.values()))
    return Plan(
        model=label,
        batch_size=batch_size,
        optimizer=(f"{optimizer} (momentum {momentum:g})" if step_optimizer != optimizer else optimizer) + (" (fused)" if fused else ""),
        dataset_size=dataset_size,
        steps=n_steps,
        steps_low=lo,
        steps_high=hi,
        steps_from=steps_from,
        memory=memory,
        coverage=iv.coverage,
        rows=rows,
        forecast=fc_info,
        notes=notes,
        precision=precision,
        input_shape=trace.input_shape,
        params=trace.params,
    )
