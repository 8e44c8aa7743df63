"""Usage: python scripts/check_unseen_finetune.py (about 30 s on one CPU thread).

A fine-tune no part of the pipeline was fitted on, through the default forecast() API (the issue-12 scenario):
a small CNN pre-trained on 1,000 digits (0-9), then every weight and a new 5-way head fine-tuned on the other training
digits 5-9 (at most 300; 177 exist, relabelled 0-4), SGD with momentum 0 / 0.9 and batches 32 / 64 / full; targets q*L0, q = 0.5, 0.25, 0.1. The default answer (the kernel
followed along the forecast's trajectory) beside the static kernel ('plain') and the real-step probe's correction."""

import copy
import time

import numpy as np
import torch

torch.set_num_threads(1)
from prenet import datasets
from prenet.convergence import forecast, targets
from prenet.convergence.nets import build, with_new_head
from prenet.convergence.training import dense_curve, finetune

d = datasets.load("digits", "train")
x_all, y_all = d.x, d.y
g = torch.Generator().manual_seed(0)
perm = torch.randperm(len(y_all), generator=g)
pre_idx = perm[:1000]
torch.manual_seed(0)
net = build("cnn", image_size=8, classes=10, widths=[16, 32])
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
xp, yp = x_all[pre_idx], y_all[pre_idx]
for ep in range(15):
    for b in torch.randperm(1000, generator=g).split(64):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xp[b]), yp[b]).backward()
        opt.step()
rest = perm[1000:]
rest = rest[y_all[rest] >= 5][:300]
xf, yf = x_all[rest], y_all[rest] - 5
print("fine-tune set", len(yf), "classes", yf.unique().tolist())
rows = []
for m, B, lr in [(0.0, 32, 0.02), (0.9, 32, 0.002), (0.0, 64, 0.02), (0.9, 64, 0.002), (0.0, 300, 0.05), (0.9, 300, 0.005)]:
    steps = 300
    model = with_new_head(copy.deepcopy(net), 5, seed=1)
    t0 = time.perf_counter()
    fc = forecast(model, xf, yf, loss="cross_entropy", lr=lr, momentum=m, batch_size=B, steps=steps, seed=0, progress=False, also_plain=True)
    tf = time.perf_counter() - t0
    probe = forecast(model, xf, yf, loss="cross_entropy", lr=lr, momentum=m, batch_size=B, steps=steps, seed=0, progress=False, correction="probe")
    t0 = time.perf_counter()
    real = finetune(copy.deepcopy(model), xf, yf, loss="cross_entropy", lr=lr, momentum=m, batch_size=B, steps=steps, seed=0)
    tr = time.perf_counter() - t0
    L, _ = dense_curve(real, steps)
    L0 = float(L[0])
    for q in (0.5, 0.25, 0.1):
        rs = targets.steps_to_loss(L, q * L0)
        ps, pp, pr = fc.steps_to_loss(q * L0), fc.plain.steps_to_loss(q * L0), probe.steps_to_loss(q * L0)
        rows.append((m, B, q, rs, ps, pp, pr))
        drift = "none" if fc.drift is None else f"{fc.drift:.3f}"
        print(
            f"m={m} B={B} lr={lr} q={q}: real {rs}, default ({fc.variant}, {fc.dynamics}) {ps}, plain {pp}, probe ({probe.variant}) {pr}; "
            f"drift {drift}; forecast {tf:.1f}s, real {tr:.1f}s",
            flush=True,
        )


def ape(i):
    v = [abs(r[i] - r[3]) / r[3] for r in rows if r[3] and r[i] is not None]
    miss = sum(1 for r in rows if (r[3] is None) != (r[i] is None))
    return np.median(v) * 100, miss, len(v)


print("median APE default %.1f%% (miss %d, n %d)" % ape(4))
print("median APE plain %.1f%% (miss %d, n %d)" % ape(5))
print("median APE probe %.1f%% (miss %d, n %d)" % ape(6))
for m in (0.0, 0.9):
    sub = [r for r in rows if r[0] == m and r[3] and r[4] is not None]
    print(f"m={m}: default median APE {np.median([abs(r[4] - r[3]) / r[3] for r in sub]) * 100:.1f}% over {len(sub)}")
