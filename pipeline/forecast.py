"""Stage ``forecast``: the convergence predictor on every sweep configuration — the plain forecast (NTK on a
subset + ODE/SDE), the drift probe and corrected forecast, and, for the gap analysis, exact linearized SGD and
the ODE/SDE on the full fine-tuning set. Also checks the NTK estimators (projection vs exact, subset vs full
spectrum). Forecasts read no fine-tuning result: only the pre-trained weights and the fine-tuning inputs."""

from __future__ import annotations

import time

import numpy as np
import polars as pl
import torch
from omegaconf import DictConfig

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from pipeline.finetune import convergence_configs, task_data
from pipeline.pool import run_items
from pipeline.pretrain import convergence_tasks
from pipeline.record import record_metrics
from pipeline.split import convergence_split_rule
from prenet.convergence import dynamics, losses
from prenet.convergence.dynamics import DivergenceError
from prenet.convergence.forecaster import forecast as run_forecast
from prenet.convergence.forecaster import run_dynamics
from prenet.convergence.ntk import empirical_ntk, outputs, relative_error
from prenet.convergence.tasks import finetune_model
from prenet.data.split_rule import assign


def _curve_rows(config_id: str, source: str, loss: np.ndarray, acc: np.ndarray | None) -> list[dict]:
    return [
        {"config_id": config_id, "source": source, "step": i, "loss": float(v), "accuracy": None if acc is None else float(acc[i])}
        for i, v in enumerate(loss)
    ]


def _one_batch_features(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, loss: str, batch_size: int, seed: int) -> tuple[float, float]:
    """Initial full-set loss and the gradient norm on the first batch (the probe-regressor baseline's inputs)."""
    F = outputs(model, x).double().numpy()
    init = losses.value(F, losses.onehot(y.numpy(), F.shape[1]), loss)
    b = torch.as_tensor(dynamics.batch_schedule(len(x), batch_size, 1, seed)[0])
    model.zero_grad(set_to_none=True)
    losses.torch_loss(model(x[b]), y[b], loss).backward()
    g = float(torch.sqrt(sum((p.grad**2).sum() for p in model.parameters() if p.grad is not None)))
    model.zero_grad(set_to_none=True)
    return init, g


def ntk_checks(model: torch.nn.Module, x: torch.Tensor, *, samples: int, proj_dims: list[int], subset: int | None, seed: int) -> dict:
    """Projection vs exact Θ on ``samples`` samples (relative Frobenius error, seconds), and the subset's
    scaled spectrum λ_k(Θ_n)/n vs λ_k(Θ_N)/N (relative error of the top 10 eigenvalues)."""
    xs = x[:samples]
    exact = empirical_ntk(model, xs, method="exact")
    out = {"samples": len(xs), "exact_seconds": exact.seconds, "projection": {}}
    for k in proj_dims:
        pr = empirical_ntk(model, xs, method="projection", proj_dim=int(k), seed=seed)
        out["projection"][str(k)] = {"relative_frobenius_error": relative_error(pr.theta, exact.theta), "seconds": pr.seconds}
    if subset is not None and subset < len(x):
        full = empirical_ntk(model, x, method="exact")
        idx = torch.as_tensor(np.sort(np.random.default_rng(seed).choice(len(x), size=subset, replace=False)))
        sub = empirical_ntk(model, x[idx], method="exact")
        top_full = np.linalg.eigvalsh(full.theta)[::-1][:10] / len(x)
        top_sub = np.linalg.eigvalsh(sub.theta)[::-1][:10] / subset
        out["subset_spectrum_top10_rel_error"] = float(np.median(np.abs(top_sub - top_full) / top_full))
        out["subset_seconds"], out["full_seconds"] = sub.seconds, full.seconds
    return out


_FULL: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _forecast_one(item: tuple) -> tuple:
    """One configuration: (run row, curve rows, None), or (config_id, [], reason) when lr is beyond the
    linearized stability bound."""
    task, c, pretrained, head_init_scale, subset, fs, gap = item
    d = task_data(task)
    model = finetune_model(task, pretrained, seed=c.seed, head_init_scale=head_init_scale)
    kw = dict(
        loss=c.loss,
        lr=c.lr,
        momentum=c.momentum,
        batch_size=c.batch_size,
        steps=c.steps,
        seed=c.seed,
        subset=subset,
        ntk=str(fs["ntk"]),
        proj_dim=int(fs["proj_dim"]),
        sde_paths=int(fs["sde_paths"]),
        drift_threshold=float(fs["drift_threshold"]),
        max_bytes=int(fs["max_bytes"]),
        progress=False,
        warn_dearer=False,  # the stage records every forecast's cost
    )
    try:
        # what forecast() answers with the configured correction; and, for the plain/corrected comparison and its
        # columns, the static kernel with the real-step drift probe
        fc = run_forecast(
            model, d.x, d.y, correction=str(fs["correction"]), probe_fraction=float(fs["probe_fraction"]), raise_on_probe_divergence=False, **kw
        )
        kw["subset"] = fc.n_used if fc.n_used < len(d.x) else None  # the same samples as the answer's
        pr = run_forecast(
            model,
            d.x,
            d.y,
            correction="probe",
            probe_fraction=float(fs["probe_fraction"]),
            also_ode=bool(fs["also_ode"]),
            cost_target=None,  # its seconds are the plain forecast's and the probe's alone
            raise_on_probe_divergence=False,
            **kw,
        )
    except DivergenceError as e:
        return c.config_id, [], f"{c.config_id}: {e}"
    plain = pr.plain
    probe_s = float(pr.details.get("probe_seconds", 0.0))
    ode = pr.ode  # None unless also_ode
    init_loss, gnorm = _one_batch_features(model, d.x, d.y, loss=c.loss, batch_size=c.batch_size, seed=c.seed)
    row = {
        "config_id": c.config_id,
        "dynamics": fc.dynamics,
        "ntk_method": fc.ntk_method,
        "n_used": fc.n_used,
        "plain_seconds": pr.seconds - probe_s,
        "ode_seconds": None if ode is None else ode.seconds,
        "probe_seconds": probe_s,
        "ntk_seconds": plain.ntk_seconds,
        "probe_steps": pr.probe_steps,
        "drift": None if pr.drift is None else float(pr.drift),
        "reliable": bool(pr.reliable) if pr.reliable is not None else True,
        "init_loss": init_loss,
        "grad_norm": gnorm if np.isfinite(gnorm) else None,
        "lam_max_over_n": fc.details["theta_max_eig_over_n"],
    }
    curves = _curve_rows(c.config_id, "forecast", plain.loss, plain.accuracy)
    curves += _curve_rows(c.config_id, "default", fc.loss, fc.accuracy)  # what forecast() answers
    if ode is not None:
        curves += _curve_rows(c.config_id, "forecast_ode", ode.loss, ode.accuracy)
    if pr.corrected is not None:
        curves += _curve_rows(c.config_id, "corrected", pr.corrected.loss, pr.corrected.accuracy)
    if gap:
        key = (repr(task), pretrained, c.seed, head_init_scale)  # the kernel at the pre-trained weights with this seed's head
        if key not in _FULL:
            _FULL[key] = (empirical_ntk(model, d.x, method="exact", max_bytes=int(fs["max_bytes"])).theta, outputs(model, d.x).double().numpy())
        theta, F0 = _FULL[key]
        y = d.y.numpy()
        with np.errstate(over="ignore", invalid="ignore"):
            L, A = dynamics.linear_sgd(
                theta, F0, y, kind=c.loss, lr=c.lr, momentum=c.momentum, batches=dynamics.batch_schedule(len(y), c.batch_size, c.steps, c.seed)
            )
            curves += _curve_rows(c.config_id, "linear_sgd", L, A)
            kind = "ode" if c.batch_size >= len(y) else "sde"
            L, A = run_dynamics(
                kind,
                theta,
                F0,
                y,
                loss=c.loss,
                lr=c.lr,
                momentum=c.momentum,
                batch_size=c.batch_size,
                steps=c.steps,
                n_full=len(y),
                seed=c.seed,
                sde_paths=int(fs["full_kernel_sde_paths"]),
            )
        curves += _curve_rows(c.config_id, "dynamics_full", L, A)
    return row, curves, None


def forecast(cfg: DictConfig) -> dict:
    """Forecast every sweep configuration (``convergence.workers`` processes); write ``paths.forecast_runs``, ``paths.forecast_curves`` and
    ``metrics/forecast.json``."""
    torch.set_num_threads(int(cfg.threads))
    fc_cfg, sw = cfg.convergence.forecast, cfg.convergence.sweep
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    configs = convergence_configs(cfg, list(tasks.values()))
    data = {name: t.finetune_data() for name, t in tasks.items()}
    subset = None if fc_cfg.subset is None else int(fc_cfg.subset)
    checks = {}
    for name, t in tasks.items():
        checks[name] = ntk_checks(
            finetune_model(t, cfg.paths.pretrained, seed=0),
            data[name].x,
            samples=int(fc_cfg.projection_check.samples),
            proj_dims=list(fc_cfg.projection_check.proj_dims),
            subset=subset,
            seed=int(cfg.seed),
        )
    rule = convergence_split_rule(cfg)
    settings = {
        k: fc_cfg[k]
        for k in (
            "ntk",
            "proj_dim",
            "sde_paths",
            "also_ode",
            "correction",
            "probe_fraction",
            "drift_threshold",
            "max_bytes",
            "full_kernel",
            "full_kernel_sde_paths",
        )
    }
    items = [
        (
            tasks[c.task],
            c,
            str(cfg.paths.pretrained),
            float(sw.head_init_scale),
            subset,
            settings,
            fc_cfg.full_kernel == "all" or (fc_cfg.full_kernel == "holdout" and assign(c.group_id, rule) == "holdout"),
        )
        for c in configs
    ]
    workers = int(cfg.convergence.workers)
    _FULL.clear()  # in-process runs (workers=1): no kernel from an earlier call's weights
    runs, curves, diverged = [], [], []
    t0 = time.monotonic()
    for row, rows, err in run_items(_forecast_one, items, workers=workers, threads=int(cfg.threads), desc="forecast", progress=bool(cfg.progress)):
        if err is not None:  # decided up front: no curve to score, said in the log and counted in the metrics
            print(f"forecast: {err}")
            diverged.append(row)
            continue
        runs.append(row)
        curves += rows
    df = pl.DataFrame(runs, schema_overrides={"ode_seconds": pl.Float64})
    write_artifact(df, cfg, "forecast_runs")
    write_artifact(pl.DataFrame(curves), cfg, "forecast_curves")
    metrics = {
        "configs": df.height,
        "wall_s": round(time.monotonic() - t0, 1),
        "threads": int(cfg.threads),
        "workers": workers,
        "median_plain_seconds": float(df["plain_seconds"].median()),
        "median_probe_seconds": float(df["probe_seconds"].median()),
        "unreliable": int((~df["reliable"]).sum()),
        "diverged_up_front": diverged,
        "ntk_checks": checks,
    }
    record_metrics(cfg, "forecast", metrics)
    print(f"forecast: {df.height} configurations ({metrics['unreliable']} flagged unreliable) -> {cfg.paths.forecast_runs}")
    return metrics


if __name__ == "__main__":
    hydra_entry(forecast)()
