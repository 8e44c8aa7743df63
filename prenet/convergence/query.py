"""The convergence question a user asks (``prenet predict convergence``): pick a task, fine-tune settings and targets,
forecast from the NTK, and answer with every variant's steps — as a plain dict the CLI prints as text or JSON."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from prenet.convergence.forecaster import forecast, passes_text, refined
from prenet.convergence.nets import with_new_head
from prenet.convergence.targets import OPTION_KIND, check_target
from prenet.convergence.tasks import Task, load_pretrained, pretrain, save
from prenet.errors import PrenetError

SETTINGS = ("loss", "lr", "momentum", "batch_size", "steps")


#: How the answer names each NTK estimator (``ntk.resolve_method``'s choices).
NTK_WORDS = {
    "exact": "an exact NTK",
    "projection": "a projected NTK",
    "kron": "a class-averaged NTK (K ⊗ I_C, the cross-class blocks dropped)",
}


def _batch_text(batch_size: int, n_train: int) -> str:
    """The header's batch: as given, or where it is not smaller than the samples, that each step is full-batch."""
    if batch_size < n_train:
        return str(batch_size)
    return f"{n_train} (all samples, full-batch: --batch-size {batch_size} is not smaller than the task's {n_train})"


def last_tenth_fall(loss: Any) -> float | None:
    """How much of the curve's whole fall L_0 − L_T happens over the last tenth of its steps (at least the last step):
    (L_{T−k} − L_T) / (L_0 − L_T), k = ⌈T/10⌉; None without a fall (a flat or rising curve, or no steps)."""
    import math

    T = len(loss) - 1
    if T < 1 or not math.isfinite(float(loss[0]) - float(loss[T])) or float(loss[0]) <= float(loss[T]):
        return None
    k = max(1, math.ceil(T / 10))
    return float((loss[T - k] - loss[T]) / (loss[0] - loss[T]))


def pick_task(tasks: Mapping[str, Any], name: str | None, where: str) -> Task:
    """Task ``name`` of ``tasks`` (the only one when ``name`` is None); ``where`` names the source in errors."""
    tasks = {k: v for k, v in (tasks or {}).items() if isinstance(v, dict)}
    name = name or (next(iter(tasks)) if len(tasks) == 1 else None)
    if name not in tasks:
        raise PrenetError(f"task {name!r} is not defined in {where}; known tasks: {', '.join(tasks) or 'none'}")
    try:
        return Task.from_cfg(name, tasks[name])
    except (KeyError, TypeError, ValueError) as e:
        raise PrenetError(f"task {name!r} is incomplete: {e} (needs dataset, arch, widths, lrs; see conf/convergence/quick.yaml)") from e


def fine_tune_settings(task: Task, given: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """loss, lr, momentum, batch_size, steps: ``given`` (the user's), else the config's ``run:``, else the task's
    first learning rate, momentum 0 and cross-entropy. Batch size and steps have no default."""
    opt = {k: given.get(k) if given.get(k) is not None else run.get(k) for k in SETTINGS}
    opt["lr"] = opt["lr"] if opt["lr"] is not None else task.lrs[0]
    opt["momentum"] = opt["momentum"] or 0.0
    opt["loss"] = opt["loss"] or "cross_entropy"
    if opt["batch_size"] is None or opt["steps"] is None:
        raise PrenetError("give --batch-size and --steps (or set them under 'run:' in the config file)")
    return opt


def answer(
    task: Task,
    settings: Mapping[str, Any],
    *,
    eps: float,
    target_loss: float | None = None,
    target_accuracy: float | None = None,
    pretrained: str | Path,
    seed: int = 0,
    subset: int | None = None,
    correction: str = "trajectory",
    probe: float = 0.05,
    ntk: str = "auto",
    max_gib: float = 4.0,
    threads: int = 1,
) -> dict[str, Any]:
    """Forecast fine-tuning ``task`` with ``settings`` (:func:`fine_tune_settings`) and answer each target: the
    default answer (``correction``: the kernel followed along the forecast's own trajectory; ``probe``: a real-step probe
    whose corrected forecast answers when it flags the plain one) beside the plain (static-kernel) one. ``probe``: the
    probe's fraction of the steps. Pre-trains and saves the task's weights in ``pretrained`` when they are missing (said on
    stderr). ``max_gib``: memory bound of the NTK (GiB)."""
    for kind, value in (("eps", eps), ("target_loss", target_loss), ("target_accuracy", target_accuracy)):
        if value is not None:
            check_target(OPTION_KIND[kind], value)  # before any work
    torch.set_num_threads(threads)
    folder = Path(pretrained)
    try:
        model = load_pretrained(task, folder)
    except PrenetError:
        print(f"no pre-trained weights for {task.name!r} in {folder}: pre-training them now (saved there)", file=sys.stderr)
        model, rec = pretrain(task, seed=seed)
        save(model, rec, folder)
    data = task.finetune_data()
    with_new_head(model, int(data.y.max()) + 1, seed=seed)
    kw = dict(
        loss=settings["loss"],
        lr=float(settings["lr"]),
        momentum=float(settings["momentum"]),
        batch_size=int(settings["batch_size"]),
        seed=seed,
        subset=subset,
        correction=correction,
        probe_fraction=probe,
        ntk=ntk,
        max_bytes=int(max_gib * 2**30),
        warn_dearer=False,  # the answer's cost line says it
    )
    fc = forecast(model, data.x, data.y, steps=int(settings["steps"]), also_plain=True, **kw)

    def to_target(reach: Callable[[Any], int | None]) -> dict[str, Any]:
        """A target's step, forecast again at twice its answer where it comes early in the horizon (refined): the
        answer, every (horizon, step) pass and the seconds of the passes beyond the first."""
        more: list[float] = []

        def run(h: int) -> tuple[Any, int | None]:
            f = fc if h == int(settings["steps"]) else forecast(model, data.x, data.y, steps=h, progress=False, **kw)
            if f is not fc:
                more.append(f.seconds)
            return f, reach(f)

        _, at, horizons = refined(run, int(settings["steps"]))
        return {"answer": at, "horizons": horizons, "more_seconds": float(sum(more))}

    plain = fc.plain
    res: dict[str, Any] = {
        "task": task.name,
        **settings,
        "n_train": len(data),
        "n_params": fc.n_params,
        "n_used": fc.n_used,
        "dynamics": fc.dynamics,
        "ntk": fc.ntk_method,
        "seconds": fc.seconds,
        "drift": fc.drift,
        "probe_steps": fc.probe_steps,
        "reliable": fc.reliable,
        "variant": fc.variant,
        "correction": correction,
        "relinearized": fc.details.get("relinearized"),
        "max_drift_sample": fc.details.get("max_drift_sample"),
        "cost": fc.details.get("cost"),
        "steps_to_converge": {
            "eps": eps,
            "answer": fc.steps_to_converge(eps),
            "last_tenth_fall": last_tenth_fall(fc.loss),
            "plain": plain.steps_to_converge(eps),
            "corrected": fc.corrected.steps_to_converge(eps) if fc.corrected else None,
        },
        "loss_curve": {str(t): float(fc.loss[t]) for t in sorted({0, fc.steps // 4, fc.steps // 2, fc.steps})},
        **({"subset_chosen": fc.details["subset_chosen"]} if "subset_chosen" in fc.details else {}),
        **({"ntk_chosen": fc.details["ntk_chosen"]} if "ntk_chosen" in fc.details else {}),
        **({"heldout": fc.details["heldout"]} if "heldout" in fc.details else {}),
    }
    if target_loss is not None:
        res["steps_to_loss"] = {"tau": target_loss, **to_target(lambda f: f.steps_to_loss(target_loss)), "plain": plain.steps_to_loss(target_loss)}
    if target_accuracy is not None:
        reached = to_target(lambda f: f.steps_to_accuracy(target_accuracy))
        res["steps_to_accuracy"] = {"a": target_accuracy, **reached, "plain": plain.steps_to_accuracy(target_accuracy)}
    return res


def render(res: Mapping[str, Any]) -> str:
    """The answer of :func:`answer` as the CLI prints it."""
    lines = [
        f"{res['task']}: fine-tune {res['n_params']:,} parameters on {res['n_train']} samples · {res['loss']} · lr {res['lr']} · "
        f"momentum {res['momentum']} · batch {_batch_text(res['batch_size'], res['n_train'])} · {res['steps']} steps",
        f"  forecast: {res['dynamics'].upper()} on {NTK_WORDS[res['ntk']]} of {res['n_used']} samples, {res['seconds']:.2f} s; "
        f"answered by the {res['variant']} forecast",
        "  predicted training loss: " + ", ".join(f"step {k}: {v:.4f}" for k, v in res["loss_curve"].items()),
    ]
    chosen = [f"{what}: {res[key]}" for key, what in (("subset_chosen", "samples"), ("ntk_chosen", "kernel")) if res.get(key)]
    if chosen:  # what the default chose, and why
        lines.insert(2, "  chosen: " + "; ".join(chosen))
    cost = res.get("cost")
    if cost:
        verdict = "met" if cost["met"] else "not met: the kernels and the dynamics cost more at this size"
        r = cost["ratio_estimate"]
        than = f"{r:.1f}× cheaper than it" if r >= 1 else f"{1 / r:.1f}× its cost"
        lines.append(
            f"  cost: the fine-tune ≈ {cost['train_seconds_estimate']:.1f} s here ({res['steps']} steps × {cost['train_step_seconds'] * 1e3:.1f} ms, "
            f"3 timed steps); the forecast, {than} (target {cost['target']:g}× cheaper: {verdict})"
        )
    if res.get("heldout"):
        g = [r for r in res["heldout"]["gaps"] if r["used"]]
        off = [r for r in res["heldout"]["gaps"] if not r["used"]]
        left = [r["step"] for r in off]
        lines.append(
            f"  subset optimism: the {res['n_used']} fitted samples' loss is moved by half its generalization gap, measured on "
            f"{res['heldout']['samples']} held-out samples at steps {', '.join(str(r['step']) for r in g)} (gap at step {g[-1]['step']}: "
            f"{g[-1]['loss_gap']:+.4f} loss)"
            + (f"; not at steps {', '.join(map(str, left))}, where the network has left its linearization" if left else "")
        )
        if off:
            lines.append(
                f"  caution: from step {off[0]['step']} the network at the forecast's weights is {off[0]['off_linear']:.2f} of its move away "
                "from the linearized outputs: fine-tuning leaves the linear regime there, and the forecast beyond it is uncertain"
            )
    sc = res["steps_to_converge"]
    lines.append(
        f"  steps to converge (|L_t - L_T| <= {sc['eps']} (L_0 - L_T)): {sc['answer'] if sc['answer'] is not None else 'not within the horizon'}"
    )
    if (fall := sc.get("last_tenth_fall")) is not None and fall > sc["eps"]:
        lines.append(
            f"  caution: the predicted loss still falls over the last tenth of the {res['steps']} steps ({100 * fall:.0f} % of its whole "
            f"fall): converged is measured against the loss at step {res['steps']}, so more --steps would move it; "
            "--target-loss or --target-accuracy give a target that does not depend on the horizon"
        )
    if res.get("relinearized") is not None:
        done = [r for r in res["relinearized"] if r["drift"] is not None]
        skipped = [r for r in res["relinearized"] if r.get("skipped")]
        end = next((r for r in res["relinearized"] if r.get("end_of_horizon")), None)
        checks = [r for r in res["relinearized"] if r["drift_sample"] is not None and not r.get("end_of_horizon")]
        where = (
            "at " + ", ".join(f"step {r['step']} (drift {r['drift']:.3f})" for r in done)
            if done
            else f"nowhere (no drift check falls inside {res['steps']} steps)"
            if not res["relinearized"]
            else (
                "nowhere"
                + (
                    ""
                    if skipped
                    else f" (the kernel stayed within the drift threshold at steps {', '.join(str(r['step']) for r in checks)}; "
                    f"largest drift {max((r['drift_sample'] for r in checks), default=0.0):.3f})"
                )
            )
        )
        if skipped:
            where += "; not re-linearized at " + ", ".join(f"step {r['step']} ({r['skipped']})" for r in skipped)
        if end is not None:  # checked once more at the horizon's end, for the verdict only
            where += f"; at the horizon's end (step {end['step']}) it had moved {end['drift_sample']:.3f}" + (
                f": past the threshold, so the forecast beyond step {checks[-1]['step'] if checks else 0} ran on a kernel that had moved "
                "(UNRELIABLE there: the features change, as in training far from a converged start)"
                if res.get("reliable") is False
                else ""
            )
        lines.append(
            f"  kernel followed along the forecast's trajectory, no training: re-linearized {where}; "
            + (
                f"drift over the horizon {res['drift']:.3f}"
                if res["drift"] is not None
                else "drift not measured (every check skipped): the static kernel answers unchecked"
            )
            + f"; plain (static kernel): {sc['plain']}"
        )
    elif res["drift"] is not None:
        verdict = (
            "reliable: the plain forecast answers"
            if res["reliable"]
            else "UNRELIABLE: fine-tuning moves the features; the corrected (re-linearized) forecast answers"
        )
        lines.append(
            f"  kernel drift after a {res['probe_steps']}-step probe: {res['drift']:.3f} ({verdict}); plain: {sc['plain']}, corrected: {sc['corrected']}"
        )
    for key, label in (("steps_to_loss", "loss <= {tau}"), ("steps_to_accuracy", "training accuracy >= {a}")):
        if key in res:
            r = res[key]
            v = r["answer"]
            again = r.get("horizons") or []
            lines.append(
                f"  steps to {label.format(**r)}: {v if v is not None else 'not reached within ' + str(res['steps']) + ' steps'}"
                + (
                    " (reached early in the horizon, whose fractions place the re-linearizations: forecast again at twice each answer, "
                    + passes_text(again)
                    + f"; {r.get('more_seconds', 0.0):.2f} s more)"
                    if len(again) > 1
                    else ""
                )
            )
    return "\n".join(lines)
