"""Usage: python scripts/check_relinearize.py [--points 0.1,0.25,0.5] (about 5 minutes on one CPU thread, after `make run`).

Does re-linearizing more than once help on long horizons (issue 12)? Re-linearizing with real probe steps only moves the
single re-linearization point later (the real curve up to the last probe is known), so this checks the self-consistent
variant that needs no real training: the linearized network is trained by SGD on the real batch order, its weight
change Δw = −η Jᵀ Σₜ aₜ (aₜ the momentum-filtered per-sample loss gradients in function space) is applied to the
network at each re-linearization point, and the kernel and outputs are recomputed there (the drift is measured at each
point). Compared on every configuration of the default sweep (and its frozen holdout) against the plain linearized SGD
from the pre-trained kernel (the `linear_sgd` gap source, same batch order), steps to each target vs the real curve.
Prints a table; writes nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import load_params  # noqa: E402
from pipeline.finetune import convergence_configs, task_data  # noqa: E402
from pipeline.pretrain import convergence_tasks  # noqa: E402
from pipeline.split import convergence_split_rule  # noqa: E402
from prenet.convergence import losses  # noqa: E402
from prenet.convergence.dynamics import batch_schedule, linear_sgd  # noqa: E402
from prenet.convergence.evaluation import by_curve, dense, steps_for, target_list  # noqa: E402
from prenet.convergence.ntk import empirical_ntk, jacobian, outputs  # noqa: E402
from prenet.convergence.tasks import finetune_model  # noqa: E402
from prenet.data.split_rule import assign  # noqa: E402


def relinearized_sgd(
    model: torch.nn.Module, x: torch.Tensor, y: np.ndarray, *, kind: str, lr: float, momentum: float, batches: list[np.ndarray], points: list[int]
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Linearized SGD on ``batches``, re-linearized at the steps in ``points`` at the weights it predicts there.
    Returns (loss, accuracy) per step and the kernel drift measured at each point."""
    params = [p for p in model.parameters()]
    w0 = torch.cat([p.detach().reshape(-1) for p in params]).double()
    n, c = len(y), int(outputs(model, x[:1]).shape[1])
    Y = losses.onehot(y, c)
    cls = np.arange(c)

    def linearize() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        J = jacobian(model, x).double()
        return J.numpy(), (J @ J.T).numpy(), outputs(model, x).double().numpy().reshape(-1)

    J, theta, F = linearize()
    a = np.zeros(n * c)  # momentum buffer in function-gradient coordinates: weight velocity = Jᵀ a
    acc_a = np.zeros(n * c)  # Σ a since the last re-linearization
    w = w0.clone()
    Ls, As, drifts = [losses.value(F.reshape(n, c), Y, kind)], [losses.accuracy(F.reshape(n, c), y)], []
    for t, b in enumerate(batches, start=1):
        G = losses.grad(F.reshape(n, c)[b], Y[b], kind)
        g = np.zeros(n * c)
        g[(b[:, None] * c + cls).reshape(-1)] = G.reshape(-1) / len(b)
        a = momentum * a + g
        acc_a += a
        F = F - lr * (theta @ a)
        if t in points:
            w = w - lr * torch.from_numpy(J.T @ acc_a)
            off = 0
            with torch.no_grad():
                for p in params:
                    p.copy_(w[off : off + p.numel()].reshape(p.shape).to(p.dtype))
                    off += p.numel()
            old = theta
            J, theta, F = linearize()
            drifts.append(float(np.linalg.norm(theta - old) / np.linalg.norm(old)))
            acc_a[:] = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            Ls.append(losses.value(F.reshape(n, c), Y, kind) if np.isfinite(F).all() else np.inf)
            As.append(losses.accuracy(F.reshape(n, c), y))
    return np.array(Ls), np.array(As), drifts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="0.1,0.25,0.5", help="re-linearization points, as fractions of the steps")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_params("params.yaml")
    fracs = [float(f) for f in args.points.split(",")]
    tasks = {t.name: t for t in convergence_tasks(cfg)}
    rule = convergence_split_rule(cfg)
    curves = by_curve(pl.read_parquet(cfg.paths.finetune_curves).filter(pl.col("source") == "real"))
    tcfg = dict(cfg.convergence.evaluate.targets)
    rows = []
    for c in convergence_configs(cfg, list(tasks.values())):
        task, d = tasks[c.task], task_data(tasks[c.task])
        real = dense(curves, c.config_id, "real", c.steps)
        if real is None or not np.isfinite(real[0]).all():
            continue
        model = finetune_model(task, cfg.paths.pretrained, seed=c.seed, head_init_scale=float(cfg.convergence.sweep.head_init_scale))
        batches = batch_schedule(len(d), c.batch_size, c.steps, c.seed)
        y = d.y.numpy()
        with np.errstate(over="ignore", invalid="ignore"):  # the plain linearized SGD from the pre-trained kernel (the gap source)
            plain = linear_sgd(
                empirical_ntk(model, d.x, method="exact").theta,
                outputs(model, d.x).double().numpy(),
                y,
                kind=c.loss,
                lr=c.lr,
                momentum=c.momentum,
                batches=batches,
            )
        rel = relinearized_sgd(
            model, d.x, y, kind=c.loss, lr=c.lr, momentum=c.momentum, batches=batches, points=[max(1, int(f * c.steps)) for f in fracs]
        )
        split = assign(c.group_id, rule)
        for kind, p, v in target_list(tcfg, float(real[0][0])):
            rs = steps_for(kind, v, *real)
            for src, (L, A) in (("plain", plain), ("relinearized", rel[:2])):
                rows.append(
                    {
                        "config": c.config_id,
                        "split": split,
                        "momentum": c.momentum,
                        "target": f"{kind}={p:g}",
                        "source": src,
                        "real": rs,
                        "pred": steps_for(kind, v, L, A),
                        "drift_max": max(rel[2]) if rel[2] else 0.0,
                    }
                )
        print(
            f"{c.task} {c.loss} lr={c.lr:g} m={c.momentum:g} B={c.batch_size} seed={c.seed}: drifts at re-linearization "
            + ", ".join(f"{x:.3f}" for x in rel[2]),
            flush=True,
        )
    df = pl.DataFrame(rows)
    pl.Config.set_tbl_rows(40)
    df = df.with_columns(((pl.col("pred") - pl.col("real")).abs() / pl.max_horizontal(pl.col("real"), pl.lit(1)) * 100).alias("ape"))
    for scope, sub in (("holdout", df.filter(pl.col("split") == "holdout")), ("all configurations", df)):
        print(f"\n{scope}: median abs. % error of steps (both reached), plain linearized SGD vs re-linearized at {fracs} of the steps")
        print(
            sub.filter(pl.col("ape").is_not_null())
            .group_by("target", "source")
            .agg(pl.col("ape").median().round(1).alias("median_ape_pct"), pl.len().alias("n"))
            .sort("target", "source")
        )
        miss = sub.group_by("source").agg(((pl.col("real").is_null()) != (pl.col("pred").is_null())).mean().round(3).alias("miss_rate"))
        print(miss.sort("source"))


if __name__ == "__main__":
    main()
