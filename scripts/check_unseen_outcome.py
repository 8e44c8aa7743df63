"""Usage: python scripts/check_unseen_outcome.py [--models data/models/outcome] [--runs 48] [--epochs 15] (about 2 min).

The early-success predictor on runs no part of the pipeline made (the issue-13 scenario): fresh digits MLPs trained in
a user's own loop (not the corpus code) over the full digits training set, hyperparameters from a wide prior —
learning rate 10^-3.5 to 10^0.7, widths 16–256 (the corpus stops at 64), batches 16–128, init scale 0.1–5, SGD with
momentum 0.9 — with prenet.telemetry.Recorder, then `predict(table.head(k))` for k = 1, 2, 3, 5, once without a domain
and without validation (as the issue's user did) and once with `domain="mlp_digits"`, `schedule="constant"` and
validation recorded.
Failure = a non-finite loss or a final test accuracy below the trained models' mlp_digits failure threshold.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def train(
    cfg: dict, x: torch.Tensor, y: torch.Tensor, xv: torch.Tensor, yv: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor, epochs: int, with_val: bool
):
    from prenet.telemetry import Recorder

    torch.manual_seed(cfg["seed"])
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, cfg["width"]), nn.ReLU(), nn.Linear(cfg["width"], 10))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(cfg["init_scale"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    rec = Recorder(model, probe_inputs=x[:128])
    g = torch.Generator().manual_seed(cfg["seed"])
    diverged = False
    for _ in range(epochs):
        tl, tc, n = 0.0, 0, 0
        for b in torch.randperm(len(x), generator=g).split(cfg["batch"]):
            opt.zero_grad()
            out = model(x[b])
            loss = nn.functional.cross_entropy(out, y[b])
            loss.backward()
            rec.after_backward(loss)
            opt.step()
            tl, tc, n = tl + float(loss.detach()) * len(b), tc + int((out.argmax(1) == y[b]).sum()), n + len(b)
        if not math.isfinite(tl):
            diverged = True
        kw = {}
        if with_val:
            with torch.no_grad():
                ov = model(xv)
            if torch.isfinite(ov).all():
                kw = {"val_loss": float(nn.functional.cross_entropy(ov, yv)), "val_accuracy": float((ov.argmax(1) == yv).float().mean())}
        rec.end_epoch(train_loss=tl / n if math.isfinite(tl) else float("nan"), train_accuracy=tc / n, **kw)
        if diverged:
            break
    with torch.no_grad():
        ot = model(xt)
    acc = float((ot.argmax(1) == yt).float().mean()) if torch.isfinite(ot).all() and not diverged else 0.1
    return rec.table(), acc, diverged


def main() -> int:
    from prenet import datasets
    from prenet.outcome import predict
    from prenet.outcome.evaluation import auc, r2
    from prenet.outcome.models import load

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=str(ROOT / "data/models/outcome"))
    ap.add_argument("--runs", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=15)
    a = ap.parse_args()
    torch.set_num_threads(1)
    _, manifest = load(a.models)
    thr = manifest["thresholds"]["mlp_digits"]["failure_threshold"]
    tr, te = datasets.load("digits", "train"), datasets.load("digits", "test")
    perm = torch.randperm(len(tr), generator=torch.Generator().manual_seed(123))
    nv = len(tr) // 7
    xv, yv, x, y = tr.x[perm[:nv]], tr.y[perm[:nv]], tr.x[perm[nv:]], tr.y[perm[nv:]]
    rng = np.random.default_rng(2026)
    cfgs = [
        {
            "lr": float(10 ** rng.uniform(-3.5, 0.7)),
            "width": int(2 ** rng.integers(4, 9)),
            "batch": int(rng.choice([16, 32, 64, 128])),
            "init_scale": float(math.exp(rng.uniform(math.log(0.1), math.log(5.0)))),
            "seed": 1000 + i,
        }
        for i in range(a.runs)
    ]
    result = {}
    for mode in ("no domain, no validation", "domain mlp_digits, schedule constant, validation"):
        with_val = mode.startswith("domain")
        ys, fails, preds = [], [], {k: ([], []) for k in (1, 2, 3, 5)}
        for cfg in cfgs:
            table, acc, div = train(cfg, x, y, xv, yv, te.x, te.y, a.epochs, with_val)
            ys.append(acc)
            fails.append(int(div or acc < thr))
            for k in preds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = predict(
                        table.head(k), domain="mlp_digits" if with_val else None, schedule="constant" if with_val else None, models_dir=a.models
                    )
                preds[k][0].append(out.final_test_accuracy)
                preds[k][1].append(out.failure_probability)
        yy, ff = np.array(ys), np.array(fails)
        result[mode] = {
            f"epoch_{k}": {"r2": r2(yy, np.array(p)), "failure_auc": auc(ff, np.array(q)), "mae": float(np.abs(yy - np.array(p)).mean())}
            for k, (p, q) in preds.items()
        }
        result[mode]["failures"] = int(ff.sum())
        print(
            mode,
            f"({a.runs} runs, {int(ff.sum())} failures):",
            "; ".join(
                f"epoch {k}: R² {v['r2']:.3f}, AUC {v['failure_auc']:.3f}, MAE {v['mae']:.3f}"
                for k, v in ((int(e.split("_")[1]), v) for e, v in result[mode].items() if e.startswith("epoch_"))
            ),
            flush=True,
        )
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
