"""How a subset's kernel differs from a larger one's (issue 30; docs/convergence.md, "What the subset gets wrong").

Pre-trains a task of the `convergence=full` cost check (its own seed and data, ~30 s on one thread), gives it the
fine-tune's new head, and computes the exact empirical NTK at w₀ on nested seeded subsets of the fine-tuning samples.
Prints, per subset size n: the scaled eigenvalues λ_k(Θ_n)/n at fixed indices k, and the share of the initial
loss residual (cross-entropy: softmax − one-hot; rows sample-major, as Θ) in the modes with λ/n at or above fixed
levels. Read-only: writes nothing.

    python scripts/check_subset_spectrum.py [--task cnn_bn_fashion_split] [--sizes 128 256 512 1024]

The 1024-sample kernel takes ~30 s and its eigendecomposition ~20 s on one thread.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

INDICES = (1, 2, 5, 10, 20, 50, 100, 200, 320, 500, 640, 1000, 1280, 2000, 2560, 4000, 5120)
LEVELS = (100, 10, 1, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="cnn_bn_fashion_split", help="a task of conf/convergence/full.yaml's cost_check")
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from prenet.convergence import losses
    from prenet.convergence.nets import with_new_head
    from prenet.convergence.ntk import empirical_ntk, outputs
    from prenet.convergence.tasks import Task, pretrain

    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base=None):
        cfg = compose("config", overrides=["convergence=full"])
    cc = cfg.convergence.cost_check
    task = Task.from_cfg(args.task, OmegaConf.to_container(cc.tasks[args.task], resolve=True))
    model, _ = pretrain(task, seed=int(cfg.seed))
    data = task.finetune_data()
    classes = int(data.y.max()) + 1
    with_new_head(model, classes, seed=int(cfg.seed))
    perm = np.random.default_rng(int(cfg.seed)).permutation(len(data.x))
    eig, share = {}, {}
    for n in args.sizes:
        idx = torch.as_tensor(perm[:n])
        theta = empirical_ntk(model, data.x[idx], method="exact").theta
        lam, U = np.linalg.eigh(theta)
        lam, U = lam[::-1] / n, U[:, ::-1]
        F = outputs(model, data.x[idx]).double().numpy()
        r = losses.grad(F, losses.onehot(np.asarray(data.y[idx]), classes), "cross_entropy").reshape(-1)
        e = (U.T @ r) ** 2
        eig[n], share[n] = lam, [float(e[lam >= v].sum() / e.sum()) for v in LEVELS]
        print(f"n = {n}: trace/n {lam.sum():.4g}", flush=True)
    print("\nλ_k / n\n    k " + " ".join(f"{n:>9}" for n in eig))
    for k in INDICES:
        print(f"{k:5d} " + " ".join(f"{eig[n][k - 1]:9.3g}" if k <= len(eig[n]) else " " * 9 for n in eig))
    print("\nshare of the initial residual in modes with λ/n ≥ level\nlevel " + " ".join(f"{n:>7}" for n in share))
    for i, v in enumerate(LEVELS):
        print(f"{v:6g} " + " ".join(f"{share[n][i]:7.3f}" for n in share))


if __name__ == "__main__":
    main()
