"""The planner: what a training job costs on each hardware option — step time × steps × price per hour.

For every hardware option the plan holds

* the predicted time of one training step (s): the step-time predictor (PreNeT: the model walked into layers,
  each layer predicted on that hardware's spec sheet, summed);
* the steps: given (``steps``, or ``epochs`` × ⌈dataset / batch⌉) or forecast by the convergence predictor
  (Zancato et al.: linearized fine-tuning dynamics from the empirical NTK, no training);
* wall time = step time × steps (s); cost = wall time × price per hour (USD, ``conf/pricing/``);
* predicted peak training memory (``prenet.steptime.memory``) and whether it fits the device.

**Intervals.** Each time and cost comes with an interval from the predictors' measured errors on held-out data
(the ``evaluate`` and ``evaluate_convergence`` metrics of the pipeline run that trained the models):

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

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prenet.errors import PrenetError
from prenet.hardware.spec import HardwareSpec
from prenet.steptime.memory import GIB, MemoryEstimate, fits

#: Memory a GPU needs beyond the tensors of a step (CUDA context, caching allocator, library workspaces), GiB.
GPU_RESERVE_GIB = 1.0


@dataclass(frozen=True)
class Intervals:
    """Measured error ratios (measured / predicted) behind the plan's intervals."""

    step_local: list[float]
    step_gpu: list[float]
    steps: list[float] | None  # None: the steps are given, not predicted
    memory_ratio_max: float | None  # largest measured / predicted peak memory of the zoo on the CPU
    coverage: float = 0.8

    def bounds(self, kind: str, *, with_steps: bool = True) -> tuple[float, float]:
        """(low, high) factors on a predicted wall time (``with_steps``) or step time for hardware of ``kind``
        (``cpu`` or ``gpu``)."""
        step = np.asarray(self.step_local if kind == "cpu" else self.step_gpu, float)
        if step.size == 0:
            step = np.asarray(self.step_gpu or self.step_local or [1.0], float)
        total = step if not (self.steps and with_steps) else np.outer(step, np.asarray(self.steps, float)).ravel()
        lo, hi = (1 - self.coverage) / 2, (1 + self.coverage) / 2
        return float(np.quantile(total, lo)), float(np.quantile(total, hi))


def loo_coverage(ratios: list[float], coverage: float) -> float | None:
    """Share of the ratios inside the central ``coverage`` interval built from all the others (leave one out): how
    often an interval made from this few measured errors holds a new one. None below 3 ratios."""
    r = np.asarray(ratios, float)
    if r.size < 3:
        return None
    lo, hi = (1 - coverage) / 2, (1 + coverage) / 2
    hits = [np.quantile(np.delete(r, i), lo) <= r[i] <= np.quantile(np.delete(r, i), hi) for i in range(r.size)]
    return float(np.mean(hits))


def load_intervals(metrics_dir: str | Path, *, steps_target: str | None = None, steps_source: str = "forecast") -> Intervals:
    """The error ratios recorded by the pipeline's ``evaluate`` (step time, memory) and ``evaluate_convergence``
    (steps to ``steps_target``, e.g. ``relative_eps=0.1``) stages in ``metrics_dir``."""
    mdir = Path(metrics_dir)
    ev_path = mdir / "evaluate.json"
    if not ev_path.is_file():
        raise PrenetError(f"{ev_path} does not exist: the intervals come from the step-time evaluation; run `dvc repro evaluate` (or `make run`)")
    ev = json.loads(ev_path.read_text())
    ops_path = mdir / "evaluate_ops.json"  # the op-level model answers step times: its measured errors bound them
    iv = json.loads(ops_path.read_text()).get("intervals") if ops_path.is_file() else ev.get("intervals")
    if not iv:
        raise PrenetError(f"{ev_path} has no 'intervals' (written by an older prenet); rerun `dvc repro evaluate`")
    steps = None
    if steps_target is not None:
        cv_path = mdir / "convergence.json"
        cv = json.loads(cv_path.read_text()) if cv_path.is_file() else {}
        measured = cv.get("intervals", {})
        # the target's own kind first, then any other measured kind (the forecast's error on the closest target)
        for key in [steps_target, *sorted(k for k in measured if k != steps_target)]:
            per = measured.get(key, {})
            entry = per.get(steps_source) or per.get("forecast") or {}
            if entry.get("ratios"):
                steps = entry["ratios"]
                break
        if not steps:
            raise PrenetError(
                f"{cv_path} has no measured forecast errors on holdout configurations; without them the steps have no "
                "interval. Rerun `dvc repro evaluate_convergence` (its holdout needs configurations that reach the targets)"
            )
    mem = ev.get("whole_model", {}).get("memory", {})
    return Intervals(
        step_local=iv.get("local_whole_model", {}).get("ratios", []),
        step_gpu=iv.get("unseen_gpu", {}).get("ratios", []),
        steps=steps,
        memory_ratio_max=mem.get("ratio_max"),
        coverage=float(iv.get("coverage", 0.8)),
    )


def load_prices(path: str | Path) -> dict[str, dict[str, Any]]:
    """``prices:`` of a pricing YAML file (``conf/pricing/*.yaml`` format): hardware name → {usd_per_hour, source, as_of}."""
    from omegaconf import OmegaConf

    p = Path(path)
    if not p.is_file():
        raise PrenetError(f"pricing file {p} does not exist (format: conf/pricing/on_demand.yaml)")
    raw = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    prices = raw.get("prices") if isinstance(raw, dict) else None
    if not isinstance(prices, dict):
        raise PrenetError(f"{p} has no 'prices:' mapping (format: conf/pricing/on_demand.yaml)")
    return check_prices(prices, str(p))


def check_prices(prices: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Each entry as {usd_per_hour: float ≥ 0, ...}; a bare number is accepted as the price."""
    out = {}
    for name, v in prices.items():
        entry = dict(v) if isinstance(v, dict) else {"usd_per_hour": v}
        try:
            price = float(entry["usd_per_hour"])
        except (KeyError, TypeError, ValueError):
            raise PrenetError(f"{where}: price of {name!r} must be a number of USD per hour (usd_per_hour), got {v!r}") from None
        if not math.isfinite(price) or price < 0:
            raise PrenetError(f"{where}: price of {name!r} must be ≥ 0 USD per hour, got {price}")
        out[str(name)] = {**entry, "usd_per_hour": price}
    return out


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


def plan_rows(
    step_seconds: dict[str, float],
    specs: dict[str, HardwareSpec],
    *,
    steps: int,
    memory: MemoryEstimate,
    intervals: Intervals,
    prices: dict[str, dict[str, Any]],
    family_share: dict[str, dict[str, float]] | None = None,
) -> list[PlanRow]:
    """One row per hardware from its predicted step time (s)."""
    lower_prices = {k.lower(): v for k, v in prices.items()}
    rows = []
    for name, step_s in step_seconds.items():
        spec = specs[name]
        lo, hi = intervals.bounds(spec.kind)
        slo, shi = intervals.bounds(spec.kind, with_steps=False)
        wall = step_s * steps
        price = lower_prices.get(name.lower()) or lower_prices.get(spec.hardware_id.lower())
        usd = price["usd_per_hour"] if price else None
        mem_gib = spec.mem_gb if spec.kind == "gpu" else host_memory_gib()
        reserve = GPU_RESERVE_GIB if spec.kind == "gpu" else 0.0
        ratio = max(intervals.memory_ratio_max or 1.0, 1.0)
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
                fits=fits(memory.total_bytes, mem_gib, reserve),
                fits_upper=fits(memory.total_bytes * ratio, mem_gib, reserve),
                price_source=price.get("source") if price else None,
                family_share=(family_share or {}).get(name, {}),
            )
        )
    return rows


def steps_interval(steps: int, intervals: Intervals) -> tuple[int, int]:
    """(low, high) steps: the point when given, else the forecast scaled by the measured ratio quantiles."""
    if not intervals.steps:
        return steps, steps
    lo, hi = (1 - intervals.coverage) / 2, (1 + intervals.coverage) / 2
    r = np.asarray(intervals.steps, float)
    return int(math.floor(steps * np.quantile(r, lo))), int(math.ceil(steps * np.quantile(r, hi)))


def format_duration(seconds: float) -> str:
    """A compact duration: 850ms, 42s, 12m, 3.4h, 2.1d, 230d (at most 6 characters below 10,000 days)."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m" if seconds >= 600 else f"{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    days = seconds / 86400
    return f"{days:.1f}d" if days < 100 else f"{days:,.0f}d"


def format_usd(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 0.01:
        return "<0.01"
    if v < 10:
        return f"{v:.2f}"
    if v < 1000:
        return f"{v:.0f}"
    return f"{v / 1000:.1f}k"


def format_step(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f}ms" if ms < 10 else (f"{ms:.0f}ms" if ms < 1000 else f"{seconds:.1f}s")


def render_table(plan: Plan, rows: list[PlanRow]) -> str:
    """The plan as text no wider than 80 columns."""
    pct = round(plan.coverage * 100)
    m = plan.memory
    shape = "x".join(str(v) for v in plan.input_shape)
    top = rows[0] if rows else None
    mix = ", ".join(f"{f} {100 * v:.0f}%" for f, v in sorted((top.family_share if top else {}).items(), key=lambda kv: -kv[1])[:4])
    lines = [
        f"{plan.model[:40]} · batch {plan.batch_size} · {plan.optimizer} · {plan.precision}"
        + (f" · {plan.dataset_size:,} samples" if plan.dataset_size else ""),
        f"input {shape} · {plan.params / 1e6:,.1f} M parameters",
        *([f"time by op family on {top.hardware[:18]}: {mix}"] if mix else []),
        f"steps: {plan.steps:,} ({plan.steps_from})"
        + (f", {pct}% interval {plan.steps_low:,}–{plan.steps_high:,}" if plan.steps_from == "forecast" else ""),
        f"peak training memory: {m.total_bytes / GIB:.2f} GiB",
        f"  (weights {m.weights_bytes / GIB:.2f}, gradients {m.gradients_bytes / GIB:.2f}, optimizer {m.optimizer_bytes / GIB:.2f}, "
        f"saved activations {m.activations_bytes / GIB:.2f})",
        "",
        f"{'hardware':<22} {'step':>7}  {'wall time [' + str(pct) + '%]':<19} {'cost USD [' + str(pct) + '%]':<19} {'memory':<7}",
    ]
    for r in rows:
        wall = f"{format_duration(r.wall_seconds)} [{format_duration(r.wall_low)}–{format_duration(r.wall_high)}]"
        cost = f"{format_usd(r.cost_usd)} [{format_usd(r.cost_low)}–{format_usd(r.cost_high)}]" if r.cost_usd is not None else "- (no price)"
        fit = "?" if r.fits is None else ("fits" if r.fits and r.fits_upper else ("tight" if r.fits else "NO"))
        lines.append(f"{r.hardware[:22]:<22} {format_step(r.step_seconds):>7}  {wall:<19} {cost:<19} {fit:<7}")
    lines += [
        "",
        f"[{pct}%]: interval from the predictors' measured holdout errors (README: Planning).",
        "memory: fits; tight = not if under-predicted as much as the worst zoo step;",
        "NO = does not fit (a GPU keeps 1 GiB for CUDA); ? = device memory unknown.",
    ]
    lines += plan.notes
    return "\n".join(line if len(line) <= 80 else line[:79] + "…" for line in lines)


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
        raise PrenetError(f"fine-tuning data {p} is not readable: {type(e).__name__}: {e}") from e
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
    subset: int,
    seed: int = 0,
    max_gib: float = 4.0,
) -> dict[str, Any]:
    """Steps of SGD fine-tuning of ``module`` on (``inputs``, ``labels``) to reach ``target`` (``converge_eps``:
    |L_t − L_T| ≤ ε (L_0 − L_T); ``target_loss``: L_t ≤ τ; ``target_accuracy``: training accuracy ≥ a), forecast
    from the NTK (the drift probe's corrected forecast when the plain one is flagged unreliable). Raises
    :class:`PrenetError` when the forecast does not reach the target within ``max_steps``."""
    from prenet.convergence import forecast
    from prenet.convergence.ntk import ProblemTooLargeError

    if target not in TARGETS:
        raise PrenetError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    from prenet.convergence.targets import OPTION_KIND, check_target

    check_target(OPTION_KIND[target], value)
    try:
        fc = forecast(
            module,
            inputs,
            labels,
            loss=loss,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            steps=max_steps,
            seed=seed,
            subset=min(subset, len(inputs)),
            max_bytes=int(max_gib * GIB),
        )
    except ProblemTooLargeError as e:
        raise PrenetError(str(e)) from e
    best = fc.best()
    steps = {"converge_eps": best.steps_to_converge, "target_loss": best.steps_to_loss, "target_accuracy": best.steps_to_accuracy}[target](value)
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
        "seconds": fc.seconds,
        "drift": fc.drift,
        "reliable": fc.reliable,
        "answered_by": "corrected" if fc.variant == "corrected" else "forecast",
        "max_steps": max_steps,
    }


def steps_target_key(target: str, value: float) -> str:
    """The convergence evaluation's metrics key whose measured errors apply to ``target`` (closest measured kind)."""
    return {"converge_eps": "relative_eps=0.1", "target_loss": "loss<=0.5*L0", "target_accuracy": "accuracy>=0.9"}[target]


def _module_for_forecast(model: Any, batch_size: int, zoo_kwargs: dict[str, Any] | None) -> Any:
    """The model with real weights (the forecast needs them): a zoo model freshly initialised, a file model as built."""
    import torch

    from prenet.steptime import predict as _p

    if isinstance(model, tuple):
        return model[0]
    torch.manual_seed(0)
    return _p.build_model(str(model), batch_size, zoo_kwargs, meta=False)[0]


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
    momentum: float = 0.0,
    prices: dict[str, dict[str, Any]] | None = None,
    models_dir: str | Path,
    metrics_dir: str | Path,
    threads: int = 1,
    overhead_path: str | Path | None = None,
    zoo_kwargs: dict[str, Any] | None = None,
    precision: str = "fp32",
) -> Plan:
    """Plan a training job of ``model`` (zoo name, ``file.py:function`` or ``(module, example_batch)``) on every
    hardware in the catalog plus ``local`` (or the ``hardware`` list). Exactly one of ``steps``, ``epochs`` (with
    ``dataset_size``) or ``target`` (``converge_eps`` | ``target_loss`` | ``target_accuracy``, with ``target_value``
    and ``finetune`` = {inputs, labels, loss, lr, max_steps, subset}) sets the number of steps. ``zoo_kwargs``: a
    zoo model's size keywords (e.g. ``{"image_size": 224}``; the zoo's defaults are CPU-sized). Step times come from the one
    step-time path (:mod:`prenet.steptime.step`) in ``precision``; a hardware without that unit gets a note, not a row."""

    from prenet.hardware import catalog, resolve
    from prenet.hardware.catalog import alias_note
    from prenet.ops import trace_step
    from prenet.steptime import predict as _p
    from prenet.steptime.efficiency import EfficiencyModel, UnsupportedPrecisionError
    from prenet.steptime.memory import predict_training_memory
    from prenet.steptime.step import DEFAULT_OVERHEAD, default_overhead_ms, device_type, predict_trace

    if batch_size < 1:
        raise PrenetError(f"--batch-size must be a positive integer, got {batch_size}")
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
    if optimizer not in ("sgd", "adam"):
        raise PrenetError(f"--optimizer must be sgd or adam, got {optimizer!r}")
    names = list(hardware) if hardware else ["local", *sorted(catalog())]
    specs = {n: resolve(n, threads=threads) for n in names}  # unknown names fail here, before any work
    alias_notes = [note for n in (hardware or []) if (note := alias_note(n))]
    module, batch = model if isinstance(model, tuple) else _p.build_model(str(model), batch_size, zoo_kwargs)
    label = model if isinstance(model, str) else type(module).__name__
    if zoo_kwargs:
        label += " (" + ", ".join(f"{k}={v}" for k, v in zoo_kwargs.items()) + ")"
    memory = predict_training_memory(module, batch, "sgd_momentum" if optimizer == "sgd" and momentum > 0 else optimizer)
    fc_info = None
    notes: list[str] = list(alias_notes)
    op_model = EfficiencyModel.load(models_dir)  # what every plan needs is read before any forecast runs: a missing file fails fast
    if target is not None:
        if target_value is None or not finetune:
            raise PrenetError("a convergence target needs its value and --finetune-data (the fine-tuning set the forecast runs on)")
        key = steps_target_key(target, float(target_value))
        by_source = {src: load_intervals(metrics_dir, steps_target=key, steps_source=src) for src in ("forecast", "corrected")}
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
            batch_size=batch_size,
            max_steps=int(finetune.get("max_steps", 2000)),
            subset=int(finetune.get("subset", 128)),
            max_gib=float(finetune.get("max_gib", 4.0)),
        )
        n_steps, steps_from = fc_info["steps"], "forecast"
        dataset_size = dataset_size or fc_info["n_train"]
        iv = by_source[fc_info["answered_by"]]
        if not fc_info["reliable"]:
            notes.append(f"the forecast's kernel drifted ({fc_info['drift']:.2f} > 0.1): the corrected forecast answers")
    else:
        iv = load_intervals(metrics_dir)
        if steps is not None:
            if steps < 1:
                raise PrenetError(f"--steps must be a positive integer, got {steps}")
            n_steps, steps_from = int(steps), "steps"
        else:
            if epochs <= 0:
                raise PrenetError(f"--epochs must be positive, got {epochs}")
            n_steps, steps_from = int(math.ceil(float(epochs) * math.ceil(dataset_size / batch_size))), "epochs"
    step_s, shares = {}, {}
    traces: dict[str, Any] = {}
    for n, spec in specs.items():
        dt = device_type(spec)
        try:
            if dt not in traces:
                traces[dt] = trace_step(module, batch, optimizer=optimizer, precision=precision, device_type=dt)
            pred, _ = predict_trace(traces[dt], spec, op_model, overhead_ms=default_overhead_ms(spec, optimizer, overhead_path or DEFAULT_OVERHEAD))
        except UnsupportedPrecisionError:
            notes.append(f"{n}: not planned, no {precision} unit in its spec sheet")
            continue
        except PrenetError:
            if precision == "tf32" and dt == "cpu":
                notes.append(f"{n}: not planned: tf32 exists on NVIDIA GPUs only")
                continue
            raise
        step_s[n] = pred.step_seconds
        shares[n] = {k: round(v, 4) for k, v in pred.family_share.items()}
    if not step_s:
        raise PrenetError(f"no hardware considered runs {precision}: " + "; ".join(notes[:3]))
    specs = {n: specs[n] for n in step_s}
    rows = plan_rows(step_s, specs, steps=n_steps, memory=memory, intervals=iv, prices=prices or {}, family_share=shares)
    known = [r for r in rows if r.fits is not None]
    if known and not any(r.fits for r in known):
        biggest = max(known, key=lambda r: r.device_memory_gib or 0)
        raise PrenetError(
            f"batch size {batch_size} does not fit: a training step needs about {memory.total_bytes / GIB:.1f} GiB "
            f"(activations {memory.activations_bytes / GIB:.1f} GiB) and the largest device "
            f"considered, {biggest.hardware}, has {biggest.device_memory_gib:g} GiB; use a smaller --batch-size "
            f"(activations scale with it) or add larger hardware"
        )
    lo, hi = steps_interval(n_steps, iv)
    trace = next(iter(traces.values()))
    return Plan(
        model=label,
        batch_size=batch_size,
        optimizer=optimizer,
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
