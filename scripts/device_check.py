"""Device check and GPU data collection, for a CUDA machine with torch (no polars/pandera/hydra needed).

Run from the repository root: ``PYTHONPATH=. python scripts/device_check.py OUT_DIR --hardware NAME [--steps ...]``,
with NAME the GPU's catalog name (``prenet hardware``, e.g. "H200 SXM 141GB"). The default steps, in order:

- ``info``: the device as torch and nvidia-smi see it;
- ``steps``: whole training steps of zoo models at GPU sizes in fp32 (torch's defaults: cuDNN on TF32), tf32, fp16 and bf16 autocast, and every
  op of each timed in place (``prenet.ops.measure_step``): the ground truth of whole-model and per-op prediction by
  precision;
- ``sampled``: sampled configurations of every registry layer and block over GPU-sized spaces, in every precision (the
  ``benchmark_ops`` stage's rows, on this GPU);
- ``amp``: AMP as training runs it (GradScaler, channels_last, fused Adam) as whole steps;
- ``zoo``: the zoo's FP32 steps at batch 16-256, with peak memory.

A measured NCHW convolution on tensor cores (fp16, bf16, tf32, and fp32 on Ampere and later, torch's defaults) is timed
with cuDNN's layout transposes inside its own op; before its rows fit a model, take them off as the DeepBench loader
does (``prenet.data.external_kernels.conv_kernel_ms``), since a traced step carries them as ops of their own.

``convergence`` (the forecast's cost on the GPU) and ``layers_quick``/``layers_large`` (the layer benchmark, from plan
files in ``--plans``) run when named. ``SMOKE=1 DEVICE=cpu`` rehearses it on a CPU in seconds. Every time is wall-clock
with ``torch.cuda.synchronize``; results are JSON/JSONL under OUT_DIR, written as they come.
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


def _stub_missing(names: tuple[str, ...]) -> None:
    """The GPU image has torch but not polars/pandera: nothing here builds a frame, so the timing code imports against
    stand-ins whose every attribute is a no-op (module-level schema declarations only). Real packages are left alone."""
    import importlib.util
    import sys
    import types

    class _Any:
        def __init__(self, *a, **k) -> None: ...
        def __call__(self, *a, **k):
            return _Any()

        def __getattr__(self, a):
            if a.startswith("__"):
                raise AttributeError(a)
            return _Any()

        def __getitem__(self, _):
            return _Any()

        def __iter__(self):
            return iter(())

        def __mro_entries__(self, bases):
            return (object,)

    def _attr(a: str):
        if a.startswith("__"):
            raise AttributeError(a)
        return _Any()

    missing = {n.split(".")[0] for n in names if importlib.util.find_spec(n.split(".")[0]) is None}
    for name in names:
        if name.split(".")[0] not in missing:
            continue
        mod = types.ModuleType(name)
        mod.__getattr__ = _attr  # type: ignore[attr-defined]
        mod.__path__ = []  # a package, so that its submodules import
        mod.STUB = True
        sys.modules[name] = mod


# what prenet imports of them (grep "import polars|from pandera" prenet pipeline)
_stub_missing(("polars", "pandera", "pandera.polars", "pandera.errors", "pandera.api", "pandera.api.polars", "pandera.api.polars.types"))

from prenet.measurement.models import measure_model, null_step_ms, to_device  # noqa: E402
from prenet.measurement.runner import measure, measurement_plan
from prenet.memory.training import measure_training_memory, predict_training_memory
from prenet.names import PRECISIONS as ALL_PRECISIONS

HW_ID = ""  # the catalog name given with --hardware (main)
TAG = ""  # its file-name slug
DEV = os.environ.get("DEVICE", "cuda")
SMOKE = os.environ.get("SMOKE") == "1"  # a fast CPU rehearsal of the script
PRECISIONS = ALL_PRECISIONS if DEV == "cuda" else ("fp32", "bf16")  # a CPU has no TF32 or FP16 autocast


def _empty_cache() -> None:
    if DEV == "cuda":
        torch.cuda.empty_cache()


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
    from prenet.ops import set_tf32

    rows, t0 = [], time.time()
    set_tf32("fp32")  # the zoo's FP32 steps as torch runs them by default, whatever an earlier step set
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
                _empty_cache()
    overhead = {o: null_step_ms(o, device=DEV) for o in ["sgd", "adam"]}
    (out / f"{TAG}_zoo.json").write_text(json.dumps({"rows": rows, "null_step_ms": overhead}, indent=1))
    log(f"zoo: {len(rows)} model steps in {time.time() - t0:.0f} s; null step {overhead}")


def ops_by_precision(out: Path, budget_s: float) -> None:
    """Whole training steps and every op of them timed in place (``prenet.ops.measure_step``) for the zoo models the op
    path must handle, in fp32 (torch's defaults: cuDNN on TF32), tf32, fp16 and bf16 autocast: GPU ground truth for the op-level model and for
    the precision handling (JSONL, one op per line; one summary line per step)."""
    from prenet import zoo
    from prenet.ops import measure_step, set_tf32
    from prenet.reference_models import REFERENCE_MODELS

    t0 = time.time()
    with (out / f"{TAG}_ops.jsonl").open("w") as f_ops, (out / f"{TAG}_steps_by_precision.jsonl").open("w") as f_steps:
        for name, bs, kw in [
            ("resnet50", 64, {"image_size": 224, "classes": 1000}),
            ("bert_base_like", 32, {"layers": 12, "seq_len": 128}),
            ("gpt_sdpa", 8, {"d": 768, "layers": 12, "heads": 12, "seq_len": 1024}),
            ("vit_tiny", 128, {"image_size": 224, "patch": 16}),
            ("mobilenet_v2_like", 128, {"image_size": 224}),
            # DeepLearningExamples' EfficientNet-B0 (reference_models): its A100 rows are 29-48 % slower than predicted,
            # with its depthwise 3x3/5x5 convolutions answered by analogy (no GPU depthwise row was ever measured)
            ("efficientnet-b0", 128, {"image_size": 224}),
            ("unet_block", 16, {"image_size": 64, "channels": 128}),
            ("audio_cnn1d", 64, {}),
            ("gru_tagger", 64, {}),
            ("lstm_lm", 32, {}),
        ]:
            for precision in PRECISIONS:
                if time.time() - t0 > budget_s:
                    break
                torch.manual_seed(0)
                built = (
                    REFERENCE_MODELS[name](batch_size=2 if SMOKE else bs, **kw)
                    if name in REFERENCE_MODELS
                    else zoo.build(name, 2 if SMOKE else bs, {name: kw})
                )
                module, batch = to_device(*built, DEV)
                set_tf32(precision)  # fp32: torch's defaults (cuDNN on TF32), as prenet predicts it
                t = measure_model(module, batch, optimizer="adam", warmup=2, repeats=5, min_block_ms=5.0, precision=precision)
                trace = measure_step(module, batch, optimizer="adam", precision=precision, min_block_ms=0.5, repeats=3)
                for r in trace.records:
                    f_ops.write(json.dumps({"model": name, "batch_size": bs, "precision": precision, "hardware_id": HW_ID, **r.__dict__}) + "\n")
                f_steps.write(
                    json.dumps(
                        {
                            "model": name,
                            "batch_size": 2 if SMOKE else bs,
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
                f_ops.flush()
                f_steps.flush()
                log(f"{name} b{bs} {precision}: {t.median_ms:.2f} ms, {len(trace.records)} ops")
                del module, batch
                _empty_cache()
    log(f"ops by precision in {time.time() - t0:.0f} s")


#: GPU-sized op spaces: conf/benchmark/quick.yaml's, with every batch range's upper end x16 and the caps raised (FLOPs
#: x1000, elements x64, embedding tables x10), so that the sampled ops reach the sizes real GPU jobs run.
GPU_SCALE = {"batch": 16, "max_flops": 1000.0, "max_elements": 64.0, "max_params": 10.0}


def gpu_spaces(conf_file: Path) -> dict:
    import yaml

    spaces = yaml.safe_load(conf_file.read_text())["ops"]
    out = {}
    for op, spec in spaces.items():
        space = dict(spec["space"])
        for key, f in GPU_SCALE.items():
            if key == "batch" and "batch" in space:
                space["batch"] = [space["batch"][0], int(space["batch"][1] * f)]
            elif key in space:
                space[key] = float(space[key]) * f
        out[op] = {"space": space}
    return out


def sampled_ops(out: Path, budget_s: float, per_kind: int) -> None:
    """Sampled configurations of every registry layer and block (GPU-sized spaces, :func:`gpu_spaces`), each a real
    training step with every op timed in place, in every precision: the same rows as the ``benchmark_ops`` stage, on this
    GPU. The (configuration, precision) pairs run in a shuffled order so that a cut-off leaves every kind and precision
    represented."""
    import random

    from prenet.errors import PrenetError
    from prenet.measurement.ops import build_config, config_id, sample_configs
    from prenet.ops import measure_step

    configs = sample_configs(gpu_spaces(Path("conf/benchmark/quick.yaml")), per_kind=per_kind, seed=0)
    todo = [(kind, c, prec, ("sgd", "adam")[i % 2]) for i, (kind, c) in enumerate(configs) for prec in PRECISIONS]
    random.Random(0).shuffle(todo)
    t0, n, skipped = time.time(), 0, []
    with (out / f"{TAG}_sampled_ops.jsonl").open("w") as f:
        for kind, c, prec, opt in todo:
            if time.time() - t0 > budget_s:
                break
            torch.manual_seed(0)
            try:
                module, x = build_config(kind, c)
                module, x = module.to(DEV), x.to(DEV)
                trace = measure_step(module, x, optimizer=opt, precision=prec, min_block_ms=0.2, repeats=3, input_grad=x.is_floating_point())
            except (PrenetError, RuntimeError) as e:  # e.g. out of memory, or a kernel missing in a dtype: recorded
                skipped.append(f"{kind} {prec}: {e}"[:200])
                continue
            meta = {"config_id": config_id(kind, c), "kind": kind, "config": json.dumps(c, sort_keys=True), "optimizer": opt, "precision": prec}
            for r in trace.records:
                f.write(json.dumps({**meta, "hardware_id": HW_ID, "torch_version": torch.__version__.split("+")[0], **r.__dict__}) + "\n")
            f.flush()
            n += 1
            del module, x
            _empty_cache()
    (out / f"{TAG}_sampled_ops_skipped.json").write_text(json.dumps(skipped, indent=1))
    log(f"sampled ops: {n}/{len(todo)} steps in {time.time() - t0:.0f} s, {len(skipped)} skipped")


def _amp_step(module, inputs, labels, opt, scaler, low):
    """One AMP training step as torch's recipe writes it (autocast forward and loss, scaled backward, scaler step)."""
    from prenet.ops import training_loss

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEV, dtype=low):
            loss = training_loss(module(inputs), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def amp_variants(out: Path, budget_s: float) -> None:
    """What AMP training really runs, as whole steps: autocast alone, with the GradScaler, in channels_last, with fused
    Adam (ResNet-50 fp16 and BERT-base bf16/fp16): ground truth for the per-op accounting of each."""
    from prenet import zoo
    from prenet.measurement.steps import unpack_example
    from prenet.measurement.timer import time_callable
    from prenet.optimizers import make_optimizer

    t0, rows = time.time(), []
    cases = [
        ("resnet50", 64, {"image_size": 224, "classes": 1000}, "fp16"),
        ("bert_base_like", 32, {"layers": 12, "seq_len": 128}, "fp16"),
        ("bert_base_like", 32, {"layers": 12, "seq_len": 128}, "bf16"),
    ]
    for name, bs, kw, prec in cases:
        for channels_last, scaler, fused in [
            (False, False, False),
            (False, True, False),
            (True, True, False),
            (True, True, True),
            (False, False, True),
        ]:
            if time.time() - t0 > budget_s or (channels_last and name != "resnet50"):
                continue
            torch.manual_seed(0)
            module, batch = to_device(*zoo.build(name, 2 if SMOKE else bs, {name: kw}), DEV)
            inputs, labels = unpack_example(batch)
            if channels_last:
                module = module.to(memory_format=torch.channels_last)
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            opt = make_optimizer("adam", module.parameters(), foreach=None if fused else True, fused=True if fused else None)
            gs = torch.amp.GradScaler(DEV, enabled=scaler)
            module.train()
            step = _amp_step(module, inputs, labels, opt, gs, {"bf16": torch.bfloat16, "fp16": torch.float16}[prec])
            t = time_callable(step, warmup=2, repeats=5, min_block_ms=5.0, sync=torch.cuda.synchronize if DEV == "cuda" else None)
            rows.append(
                {
                    "model": name,
                    "batch_size": bs,
                    "sizes": kw,
                    "precision": prec,
                    "channels_last": channels_last,
                    "grad_scaler": scaler,
                    "fused_adam": fused,
                    "hardware_id": HW_ID,
                    "measured_ms": t.median_ms,
                    "spread_rel": t.spread_rel,
                }
            )
            log(f"amp {name} {prec} cl={channels_last} scaler={scaler} fused={fused}: {t.median_ms:.2f} ms")
            del module, batch, inputs, opt
            _empty_cache()
    (out / f"{TAG}_amp_variants.json").write_text(json.dumps(rows, indent=1))


def gpu_info(out: Path) -> None:
    """The device as the driver reports it (name, clocks, power limit) beside torch's view."""
    import subprocess

    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu"}
    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        info |= {"sms": p.multi_processor_count, "total_memory": p.total_memory, "cudnn": torch.backends.cudnn.version()}
        q = "name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,clocks.sm,temperature.gpu"
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
        info["nvidia_smi"] = r.stdout
    (out / f"{TAG}_info.json").write_text(json.dumps(info, indent=1))
    log("info:", json.dumps(info))


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
    ap.add_argument(
        "--plans", type=Path, default=Path("."), help="folder of bench_quick.json and bench_large.json (the layers_* steps' measurement plans)"
    )
    ap.add_argument("--hardware", required=True, help='the GPU\'s catalog name, as `prenet hardware` lists it (e.g. "H200 SXM 141GB")')
    ap.add_argument(
        "--steps",
        default="info,steps,sampled,amp,zoo",
        help="comma-separated, in order, of: info, steps, sampled, amp, zoo, convergence, layers_quick, layers_large",
    )
    args = ap.parse_args()
    import polars

    # the catalog needs the real polars; on the GPU image (stand-in polars) the name is recorded as given
    HW_ID = (
        args.hardware
        if getattr(polars, "STUB", False)
        else __import__("prenet.hardware.catalog", fromlist=["resolve_name"]).resolve_name(args.hardware)
    )
    TAG = re.sub(r"[^a-z0-9]+", "_", HW_ID.lower()).strip("_")
    out, plans = args.out, args.plans
    out.mkdir(parents=True, exist_ok=True)
    log("torch", torch.__version__, torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu")
    steps = {
        "info": lambda: gpu_info(out),
        "steps": lambda: ops_by_precision(out, 5 if SMOKE else 170),
        "sampled": lambda: sampled_ops(out, 10 if SMOKE else 150, 1 if SMOKE else 10),
        "amp": lambda: amp_variants(out, 5 if SMOKE else 45),
        "zoo": lambda: zoo_models(out, 5 if SMOKE else 45),
        "convergence": lambda: convergence(out),
        "layers_quick": lambda: layers(out, plans / "bench_quick.json", "quick", 5 if SMOKE else 130),
        "layers_large": lambda: layers(out, plans / "bench_large.json", "large", 5 if SMOKE else 110),
    }
    for name in args.steps.split(","):
        t0 = time.time()
        try:
            steps[name]()
        except Exception:
            log(f"{name} FAILED")
            traceback.print_exc()
        log(f"step {name}: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
