"""Device check and GPU data collection, for a CUDA machine with torch (no polars/pandera/hydra needed).

Run from the repository root: ``PYTHONPATH=. python scripts/device_check.py OUT_DIR PLAN_DIR --hardware NAME``, with NAME
the GPU's catalog name (``prenet hardware``, e.g. "H200 SXM 141GB"): its spec sheet lives in the catalog only. It

1. benchmarks the layer registry on ``cuda`` with the default plan (the CPU's shapes) and a GPU-sized plan
   (resumable JSONL shards, the same rows as the ``benchmark`` stage);
2. times whole-model training steps of the zoo on ``cuda`` (ground truth for whole-model GPU prediction);
3. runs the convergence predictor on ``cuda``: the forecast API against real fine-tuning on digits, the NTK
   estimators on a larger CNN, and a full-data Fashion-MNIST fine-tune vs its forecast (cost ratio).

Every time is wall-clock with ``torch.cuda.synchronize``; results are JSON/JSONL under OUT_DIR.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import time
import traceback
from pathlib import Path

import torch

from prenet.measurement.models import measure_model, null_step_ms, to_device
from prenet.measurement.runner import measure, measurement_plan
from prenet.memory.training import measure_training_memory, predict_training_memory

HW_ID = ""  # the catalog name given with --hardware (main)
TAG = ""  # its file-name slug
DEV = os.environ.get("DEVICE", "cuda")
SMOKE = os.environ.get("SMOKE") == "1"  # a fast CPU rehearsal of the script


def log(*a) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def layers(out: Path, plan_file: Path, tag: str, budget_s: float) -> None:
    b = json.loads(plan_file.read_text())
    plan = measurement_plan(b["ops"], directions=b["directions"], optimizers=b["optimizers"], seed=0)
    t0 = time.time()
    rows = measure(
        plan,
        hardware_id=HW_ID,
        shard_dir=out / f"shards_{tag}",
        device=DEV,
        threads=1,
        dtype=b["dtype"],
        warmup=int(b["warmup"]),
        repeats=int(b["repeats"]),
        min_block_ms=float(b["min_block_ms"]),
        max_seconds=budget_s,
        progress=False,
    )
    with (out / f"{TAG}_layers_{tag}.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    log(f"layers {tag}: {len(rows)}/{len(plan)} measured in {time.time() - t0:.0f} s")


def zoo_models(out: Path, budget_s: float) -> None:
    from prenet import zoo

    rows, t0 = [], time.time()
    for name in ["mlp", "vgg16", "resnet18", "resnet50", "lstm_lm", "bert_base_like", "gpt2_small_like"]:
        for bs in [16, 32, 64, 128, 256]:
            for opt in ["sgd", "adam"]:
                if time.time() - t0 > budget_s:
                    break
                torch.manual_seed(0)
                module, batch = to_device(*zoo.build(name, bs), DEV)
                peak = measure_training_memory(module, batch, opt)  # CUDA: max_memory_allocated of one step
                with torch.device("meta"):
                    predicted = predict_training_memory(*zoo.build(name, bs), opt).total_bytes
                t = measure_model(module, batch, optimizer=opt, warmup=2, repeats=5, min_block_ms=5.0)
                rows.append(
                    {
                        "model": name,
                        "batch_size": bs,
                        "optimizer": opt,
                        "hardware_id": HW_ID,
                        "threads": 1,
                        "torch_version": torch.__version__.split("+")[0],
                        "dtype": "float32",
                        "params": sum(p.numel() for p in module.parameters()),
                        "measured_ms": t.median_ms,
                        "spread_rel": t.spread_rel,
                        "repeats": t.repeats,
                        "peak_memory_bytes": peak,
                        "predicted_memory_bytes": predicted,
                    }
                )
                del module, batch
                torch.cuda.empty_cache()
    overhead = {o: null_step_ms(o, device=DEV) for o in ["sgd", "adam"]}
    (out / f"{TAG}_zoo.json").write_text(json.dumps({"rows": rows, "null_step_ms": overhead}, indent=1))
    log(f"zoo: {len(rows)} model steps in {time.time() - t0:.0f} s; null step {overhead}")


def ops_by_precision(out: Path, budget_s: float) -> None:
    """Whole training steps and every op of them timed in place (``prenet.ops.measure_step``) for the zoo models the op
    path must handle, in fp32 (TF32 off), tf32, fp16 and bf16 autocast: GPU ground truth for the op-level model and for
    the precision handling (JSONL, one op per line; one summary line per step)."""
    from prenet import zoo
    from prenet.ops import measure_step

    t0 = time.time()
    with (out / f"{TAG}_ops.jsonl").open("w") as f_ops, (out / f"{TAG}_steps_by_precision.jsonl").open("w") as f_steps:
        for name, bs, kw in [
            ("resnet50", 64, {"image_size": 224, "classes": 1000}),
            ("mobilenet_v2_like", 128, {"image_size": 224}),
            ("vit_tiny", 128, {"image_size": 224, "patch": 16}),
            ("gpt_sdpa", 8, {"d": 768, "layers": 12, "heads": 12, "seq_len": 1024}),
            ("bert_base_like", 32, {"layers": 12, "seq_len": 128}),
            ("unet_block", 16, {"image_size": 64, "channels": 128}),
            ("audio_cnn1d", 64, {}),
            ("gru_tagger", 64, {}),
            ("lstm_lm", 32, {}),
        ]:
            for precision in ("fp32", "tf32", "fp16", "bf16"):
                if time.time() - t0 > budget_s:
                    break
                torch.manual_seed(0)
                module, batch = to_device(*zoo.build(name, bs, {name: kw}), DEV)
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
                t = measure_model(module, batch, optimizer="adam", warmup=2, repeats=5, min_block_ms=5.0, precision=precision)
                trace = measure_step(module, batch, optimizer="adam", precision=precision, min_block_ms=0.5, repeats=3)
                for r in trace.records:
                    f_ops.write(json.dumps({"model": name, "batch_size": bs, "precision": precision, "hardware_id": HW_ID, **r.__dict__}) + "\n")
                f_steps.write(
                    json.dumps(
                        {
                            "model": name,
                            "batch_size": bs,
                            "sizes": kw,
                            "precision": precision,
                            "hardware_id": HW_ID,
                            "measured_ms": t.median_ms,
                            "spread_rel": t.spread_rel,
                            "ops": len(trace.records),
                            "sum_of_ops_ms": sum(r.measured_ms or 0 for r in trace.records),
                        }
                    )
                    + "\n"
                )
                del module, batch
                torch.cuda.empty_cache()
    log(f"ops by precision in {time.time() - t0:.0f} s")


def convergence(out: Path) -> None:
    from prenet.convergence import targets
    from prenet.convergence import training as ft
    from prenet.convergence.forecaster import forecast
    from prenet.convergence.nets import with_new_head
    from prenet.convergence.ntk import empirical_ntk, relative_error
    from prenet.convergence.tasks import Task, pretrain

    res: dict = {}
    dev = DEV
    # (a) digits, forecast API on cuda vs real fine-tuning on cuda
    t = Task.from_cfg(
        "cnn_digits_split",
        {
            "dataset": "digits",
            "arch": "cnn",
            "widths": [16, 32],
            "pretrain": {"classes": [0, 1, 2, 3, 4]},
            "finetune": {"classes": [5, 6, 7, 8, 9], "n_train": 256},
            "lrs": [0.006],
        },
    )
    m, rec = pretrain(t)
    with_new_head(m, 5, seed=0)
    m = m.to(dev).eval()
    d = t.finetune_data()
    x, y = d.x.to(dev), d.y.to(dev)
    rows = []
    for loss in ["mse", "cross_entropy"]:
        for lr, mom, B in [(0.006, 0.0, 256)] if SMOKE else [(0.002, 0.0, 32), (0.006, 0.0, 32), (0.002, 0.9, 32), (0.006, 0.0, 256)]:
            r = ft.finetune(copy.deepcopy(m), x, y, loss=loss, lr=lr, momentum=mom, batch_size=B, steps=200, seed=0)
            L, _ = ft.dense_curve(r, 200)
            f = forecast(m, x, y, loss=loss, lr=lr, momentum=mom, batch_size=B, steps=200, subset=128)
            rows.append(
                {
                    "loss": loss,
                    "lr": lr,
                    "momentum": mom,
                    "batch_size": B,
                    "real_steps_eps0.1": targets.steps_to_converge(L, 0.1),
                    "pred_steps_eps0.1": f.steps_to_converge(0.1),
                    "corrected_steps_eps0.1": f.corrected.steps_to_converge(0.1) if f.corrected else None,
                    "drift": f.drift,
                    "train_seconds": r.train_seconds,
                    "forecast_seconds": f.seconds,
                    "ntk_method": f.ntk_method,
                }
            )
    res["digits_cuda"] = rows
    log("digits on cuda:", json.dumps(rows)[:600])
    # (b) NTK estimators on a larger CNN (exact vs projection), on cuda
    tb = Task.from_cfg(
        "fashion_cnn_wide",
        {
            "dataset": "fashion_mnist",
            "arch": "cnn_bn",
            "widths": [64, 128, 128],
            "image_size": 28,
            "pretrain": {"classes": [0, 1, 2, 3, 4], "epochs": 2, "limit": 600 if SMOKE else 30000, "batch_size": 256},
            "finetune": {"classes": [5, 6, 7, 8, 9], "n_train": 600 if SMOKE else 30000},
            "lrs": [0.01],
        },
    )
    t0 = time.time()
    torch.manual_seed(0)
    data = tb.pretrain_data()
    mb = tb.build(5).to(dev)
    opt = torch.optim.Adam(mb.parameters(), lr=3e-3)
    xs, ys = data.x.to(dev), data.y.to(dev)
    mb.train()
    for _ in range(2):
        perm = torch.randperm(len(ys), device=dev)
        for i in range(0, len(ys), 256):
            bi = perm[i : i + 256]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(mb(xs[bi]), ys[bi]).backward()
            opt.step()
    mb.eval()
    with_new_head(mb, 5, seed=0)
    mb = mb.to(dev).eval()
    res["pretrain_fashion_seconds"] = time.time() - t0
    fd = tb.finetune_data()
    fx, fy = fd.x.to(dev), fd.y.to(dev)
    xs256 = fx[: 32 if SMOKE else 256]
    ex = empirical_ntk(mb, xs256, method="exact")
    proj = {}
    for k in [50] if SMOKE else [500, 2000, 8000]:
        pr = empirical_ntk(mb, xs256, method="projection", proj_dim=k)
        proj[k] = {"relative_frobenius_error": relative_error(pr.theta, ex.theta), "seconds": pr.seconds}
    res["ntk_wide_cnn"] = {"n_params": ex.n_params, "samples": 256, "exact_seconds": ex.seconds, "projection": proj}
    log("ntk:", json.dumps(res["ntk_wide_cnn"]))
    # (c) full-data fine-tune (30,000 samples, several epochs) vs its forecast from a 256-sample NTK
    cost = []
    for loss, lr, mom, B, epochs in [("cross_entropy", 0.01, 0.9, 128, 1 if SMOKE else 8), ("cross_entropy", 0.005, 0.0, 128, 1 if SMOKE else 8)]:
        steps = epochs * (len(fy) // B)
        r = ft.finetune(copy.deepcopy(mb), fx, fy, loss=loss, lr=lr, momentum=mom, batch_size=B, steps=steps, seed=0, log_every=max(1, steps // 40))
        L, _ = ft.dense_curve(r, steps)
        entry = {
            "loss": loss,
            "lr": lr,
            "momentum": mom,
            "batch_size": B,
            "steps": steps,
            "n_train": len(fy),
            "train_seconds": r.train_seconds,
            "real_steps_eps0.1": targets.steps_to_converge(L, 0.1),
            "real_final_loss": float(L[-1]),
        }
        for dyn in ["ode", "sde"]:
            f = forecast(
                mb,
                fx,
                fy,
                loss=loss,
                lr=lr,
                momentum=mom,
                batch_size=B,
                steps=steps,
                subset=32 if SMOKE else 256,
                dynamics_kind=dyn,
                probe_fraction=0.0,
            )
            entry[dyn] = {
                "seconds": f.seconds,
                "ntk_seconds": f.ntk_seconds,
                "pred_steps_eps0.1": f.steps_to_converge(0.1),
                "pred_final_loss": float(f.loss[-1]),
                "cost_ratio": r.train_seconds / f.seconds,
            }
        cost.append(entry)
        log("cost:", json.dumps(entry))
    res["cost_fashion_full"] = cost
    (out / f"{TAG}_convergence.json").write_text(json.dumps(res, indent=1, default=float))


def main() -> None:
    global HW_ID, TAG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for the JSON/JSONL results")
    ap.add_argument("plans", type=Path, help="folder of bench_quick.json and bench_large.json (measurement plans)")
    ap.add_argument("--hardware", required=True, help='the GPU\'s catalog name, as `prenet hardware` lists it (e.g. "H200 SXM 141GB")')
    args = ap.parse_args()
    try:  # the catalog needs polars; without it the name is recorded as given
        from prenet.hardware.catalog import resolve_name

        HW_ID = resolve_name(args.hardware)
    except ImportError:
        HW_ID = args.hardware
    TAG = re.sub(r"[^a-z0-9]+", "_", HW_ID.lower()).strip("_")
    out, plans = args.out, args.plans
    out.mkdir(parents=True, exist_ok=True)
    log("torch", torch.__version__, torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu")
    steps = [
        ("ops by precision", lambda: ops_by_precision(out, 5 if SMOKE else 150)),
        ("convergence", lambda: convergence(out)),
        ("zoo", lambda: zoo_models(out, 5 if SMOKE else 60)),
        ("layers quick", lambda: layers(out, plans / "bench_quick.json", "quick", 5 if SMOKE else 130)),
        ("layers large", lambda: layers(out, plans / "bench_large.json", "large", 5 if SMOKE else 110)),
    ]
    for name, fn in steps:
        try:
            fn()
        except Exception:
            log(f"{name} FAILED")
            traceback.print_exc()


if __name__ == "__main__":
    main()
