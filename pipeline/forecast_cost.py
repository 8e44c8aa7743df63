"""Stage ``forecast_cost``: the convergence forecast where its cost matters — a full-data fine-tune (thousands of
samples, several epochs) against its forecast from an NTK on a subset. Off by default (minutes of CPU); run with
``dvc exp run -S convergence.cost_check.enabled=true`` or ``python -m pipeline.forecast_cost convergence.cost_check.enabled=true``."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from pipeline.config import hydra_entry
from prenet.convergence import targets
from prenet.convergence.finetune import dense_curve, finetune
from prenet.convergence.forecast import forecast as run_forecast
from prenet.convergence.nets import n_params, with_new_head
from prenet.convergence.tasks import Task, pretrain
from prenet.data.io import write_json
from prenet.report import figures


def forecast_cost(cfg: DictConfig) -> dict:
    """Pre-train, fine-tune on all ``n_train`` samples for ``epochs`` epochs (loss logged on a fixed sample of
    the training set), forecast from a ``subset``-sample NTK (ODE and SDE); write ``metrics/forecast_cost.json``
    and ``plots/forecast_cost.png``."""
    cc = cfg.convergence.cost_check
    out = Path(cfg.paths.metrics) / "forecast_cost.json"
    fig = Path(cfg.paths.plots) / "forecast_cost.png"
    if not cc.enabled:
        write_json({"enabled": False}, out)
        figures.loss_curves({}, {}, fig)
        print("forecast_cost: disabled (convergence.cost_check.enabled=false)")
        return {"enabled": False}
    torch.set_num_threads(int(cfg.threads))
    task = Task.from_cfg(str(cc.task.name), OmegaConf.to_container(cc.task, resolve=True))
    t0 = time.perf_counter()
    model, rec = pretrain(task, seed=int(cfg.seed))
    pre_s = time.perf_counter() - t0
    data = task.finetune_data()
    with_new_head(model, int(data.y.max()) + 1, seed=int(cfg.seed))
    g = torch.Generator().manual_seed(int(cfg.seed))
    log_idx = torch.randperm(len(data), generator=g)[: int(cc.log_samples)]
    results, curves = {}, {}
    for run in cc.runs:
        r = OmegaConf.to_container(run, resolve=True)
        B = int(r["batch_size"])
        steps = int(r["epochs"]) * (len(data) // B)
        key = f"{r['loss']} lr={r['lr']:g} m={r['momentum']:g} B={B}"
        real = finetune(copy.deepcopy(model), data.x, data.y, loss=r["loss"], lr=float(r["lr"]), momentum=float(r["momentum"]), batch_size=B,
                        steps=steps, seed=int(cfg.seed), log_every=max(1, steps // int(cc.log_points)), log_x=data.x[log_idx], log_y=data.y[log_idx])
        L, _ = dense_curve(real, steps)
        entry = {"steps": steps, "epochs": int(r["epochs"]), "n_train": len(data), "n_params": n_params(model), "train_seconds": real.train_seconds,
                 "real_steps_to_converge": targets.steps_to_converge(L, float(cc.eps)), "real_final_loss": float(L[-1])}
        curves[key] = {"real": (L, None)}
        for dyn in cc.dynamics:
            fc = run_forecast(model, data.x, data.y, loss=r["loss"], lr=float(r["lr"]), momentum=float(r["momentum"]), batch_size=B, steps=steps,
                              seed=int(cfg.seed), subset=int(cc.subset), dynamics_kind=str(dyn), probe_fraction=0.0, progress=False)
            p = fc.steps_to_converge(float(cc.eps))
            entry[dyn] = {"seconds": fc.seconds, "ntk_seconds": fc.ntk_seconds, "ntk_method": fc.ntk_method, "pred_steps_to_converge": p,
                          "pred_final_loss": float(fc.loss[-1]), "cost_ratio": real.train_seconds / fc.seconds,
                          "abs_pct_error": None if p is None or not entry["real_steps_to_converge"] else
                          100 * abs(p - entry["real_steps_to_converge"]) / entry["real_steps_to_converge"]}
            curves[key][f"forecast_{dyn}" if dyn != "sde" else "forecast"] = (fc.loss, None)
        results[key] = entry
        print(f"forecast_cost: {key}: {steps} steps, real {real.train_seconds:.1f} s; " +
              ", ".join(f"{d}: {entry[d]['seconds']:.1f} s ({entry[d]['cost_ratio']:.1f}x), steps {entry[d]['pred_steps_to_converge']} vs {entry['real_steps_to_converge']}"
                        for d in cc.dynamics))
    metrics = {"enabled": True, "task": task.name, "dataset_source": rec["data_source"], "pretrain_seconds": pre_s, "subset": int(cc.subset),
               "eps": float(cc.eps), "threads": int(cfg.threads), "log_samples": int(cc.log_samples), "runs": results}
    write_json(metrics, out)
    figures.loss_curves(curves, {k: k for k in curves}, fig)
    return metrics


if __name__ == "__main__":
    hydra_entry(forecast_cost)()
