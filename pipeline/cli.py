"""The ``prenet`` command line. Every subcommand has ``--help``; errors print one line and exit non-zero."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Callable, NoReturn

from pipeline.config import artifact_path, rooted
from prenet.errors import PrenetError


def _cmd_hardware(args: argparse.Namespace) -> None:
    from prenet.hardware import catalog, resolve

    if args.action == "list":
        print(f"{'name':28} {'TFLOP/s fp32':>12} {'bf16':>6} {'GB/s':>6} {'mem GB':>6} {'MHz boost→math':>15}  also runs")
        for name, s in sorted(catalog().items()):
            mem = f"{s.mem_gb:g}" if s.mem_gb else "-"
            clock = f"{s.clock_mhz:.0f}→{s.sustained_clock_mhz:.0f}" if s.compute_clock_share < 1 else f"{s.clock_mhz:.0f}"
            bf16 = f"{s.peak_bf16_tflops:.0f}" if s.peak_bf16_tflops else "-"
            units = " ".join(u for u in ("tf32", *s.autocast_precisions()) if s.peak_tflops(u)) or "fp32 only"
            print(f"{name:28} {s.peak_fp32_tflops:12.1f} {bf16:>6} {s.mem_bw_gbps:6.0f} {mem:>6} {clock:>15}  {units}")
        print("MHz boost→math: a power-limited board's clock on dense math (prenet.hardware.power), which scales its peaks;")
        print("also runs: the precisions its spec sheet has units for (--precision); sources: prenet hardware show NAME")
        print("also: 'local' (this machine, detected) or a path to a YAML spec file")
        return
    if not args.name:
        raise PrenetError("`prenet hardware show` needs a NAME (a catalog name, 'local' or a spec.yaml path)")
    from prenet.hardware.catalog import alias_note

    spec = resolve(args.name, threads=args.threads, local_record=artifact_path("hardware_record"))  # as predict reads it
    if (note := alias_note(args.name)) is not None:
        print(f"note: {note}", file=sys.stderr)  # stdout stays the JSON
    print(json.dumps(spec.to_dict(), indent=2))


def _cmd_models(args: argparse.Namespace) -> None:
    from prenet.user_models import model_names

    names = model_names(args.source, args.pattern)
    if args.all and args.source != "hf":
        raise PrenetError(
            "`prenet models --all` is for hf: (every transformers model type, with why some do not build); other sources list every name already"
        )
    note = None
    if names and args.source == "hf":
        import torch

        from prenet.hf_buildable import listing
        from prenet.hf_models import import_transformers

        names, note = listing(names, import_transformers().__version__, show_all=args.all, torch_version=torch.__version__)
        if not names:
            print(f"no hf model type matching {args.pattern!r} builds here; `prenet models hf {args.pattern!r} --all` says why")
            return
    print("\n".join(names) if names else f"no {args.source} model matches {args.pattern!r}")
    if note:  # stderr: stdout stays the list
        print(f"note: {note}", file=sys.stderr)


def _cmd_retrain(args: argparse.Namespace) -> None:
    from pipeline.config import compose

    repo = Path(args.repo).resolve()
    compose(args.overrides or [], repo / "conf")  # a bad override is one line here, before Prefect starts a server
    from pipeline.flows import retrain

    result = retrain(repo_dir=str(repo), overrides=args.overrides or None)
    print(f"retrain finished; dvc status: {result['dvc_status']}")


def _model_arg_value(item: str, val: str) -> int | float | bool | str:
    """A ``--model-arg`` value: true/false, a positive integer (a size), a number, or a name (a transformers config
    field such as ``_attn_implementation=eager``)."""
    if val.lower() in ("true", "false"):
        return val.lower() == "true"
    try:
        n = int(val)
    except ValueError:
        try:
            return float(val)
        except ValueError:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", val):
                return val
            raise PrenetError(f"--model-arg {item!r}: the value must be an integer, a number, true/false or a name") from None
    if n < 1:
        raise PrenetError(f"--model-arg {item!r}: an integer is a size and must be positive (a rate of zero is 0.0)")
    return n


def _zoo_kwargs(args: argparse.Namespace) -> dict[str, int | float | bool] | None:
    """``--model-arg KEY=VALUE`` (repeatable; also spelled ``--zoo-arg``) and ``--seq-len N`` → the model builder's
    keywords: an integer (a size, positive), a number (e.g. timm's ``drop_path_rate=0.1``) or true/false."""
    out: dict[str, int | float | bool] = {}
    for item in args.zoo_arg or []:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise PrenetError(f"--model-arg {item!r}: expected KEY=VALUE, e.g. --model-arg image_size=224")
        out[key.strip()] = _model_arg_value(item, val.strip())
    seq_len = getattr(args, "seq_len", None)
    if seq_len is not None and str(getattr(args, "model", "")).startswith(("torchvision:", "timm:")):
        raise PrenetError(
            f"--seq-len applies to text models (hf:, the zoo's); {args.model} is an image model: --model-arg image_size=N sets its input"
        )
    if seq_len is not None:
        if out.get("seq_len", seq_len) != seq_len:
            raise PrenetError(f"--seq-len {seq_len} and --model-arg seq_len={out['seq_len']} disagree: give one")
        out["seq_len"] = seq_len
    return out or None


def _cmd_predict_step_time(args: argparse.Namespace) -> None:
    from prenet.api import predict_step_time
    from prenet.hardware import resolve
    from prenet.hardware.catalog import alias_note
    from prenet.memory.estimate import GIB, MemoryEstimate, fit_advice, fits

    hw = resolve(args.hardware, threads=args.threads, local_record=artifact_path("hardware_record"))
    p = predict_step_time(
        args.model,
        batch_size=args.batch_size,
        hardware=hw,
        optimizer=args.optimizer,
        precision=args.precision,
        dataset_size=args.dataset_size,
        threads=args.threads,
        models_dir=args.models,
        zoo_kwargs=_zoo_kwargs(args),
        fused=args.fused,
        memory_format=args.memory_format,
        grad_accum=args.grad_accum,
        checkpointing=args.checkpointing,
        with_memory=True,
        gpus=args.gpus,
        nodes=args.nodes,
        parallel=args.parallel,
        network_gbits=args.network,
    )
    if (note := alias_note(args.hardware)) is not None:
        p.notes.insert(0, note)
    dev_gib = hw.mem_gb if hw.kind == "gpu" else None
    mem_bytes = int(p.memory_bytes or 0)
    fit = fits(mem_bytes, dev_gib) if dev_gib and p.memory_bytes is not None else None
    if fit is False and p.memory is not None:
        from prenet.parallel.data_parallel import parse_parallel

        strategy, tp = parse_parallel(args.parallel)
        world = args.gpus * args.nodes
        shards = world if strategy == "fsdp" and world > 1 else (tp or 1)  # the state's share each GPU holds
        advice = fit_advice(
            MemoryEstimate(**{k: v for k, v in p.memory.items() if k != "total_bytes"}),
            dev_gib,
            batch_size=args.batch_size,
            checkpointing=args.checkpointing,
            precision=args.precision,
            low_precisions=hw.autocast_precisions(),
            shards=shards,
        )
        p.notes.append(f"a step needs about {mem_bytes / GIB:.1f} GiB and {hw.hardware_id} has {dev_gib:g} GiB: it does not fit; " + advice)
    if args.json:
        d = p.to_dict()
        d["fits"] = fit
        print(json.dumps(d, indent=2, default=float))
        return
    shape = "x".join(str(s) for s in p.input_shape)
    opt = f"{args.optimizer} (fused)" if args.fused else args.optimizer
    fmt = " · channels_last" if args.memory_format == "channels_last" else ""
    where = hw.hardware_id if p.parallel is None else f"{p.parallel['gpus'] * p.parallel['nodes']} × {hw.hardware_id} ({p.parallel['strategy']})"
    from prenet.planner.render import parameters_text

    print(f"{args.model} · input {shape} · {parameters_text(p.params)} · {args.precision} · {opt}{fmt} · {where}")
    if at := hw.extra.get("measured_at"):  # not the benchmark's record: this CPU's first measurement, stored
        print(
            f"  hardware: this CPU at {hw.extra.get('threads', args.threads)} thread(s) as measured {at}, stored for the next answers (prenet/hardware/local.py: stored_cpu)"
        )
    cpu_issue = p.host_issue_ms if hw.kind == "cpu" else 0.0  # a CPU issues its ops in turn with running them
    parts = [f"{p.ops} ops"] + [
        f"+ {ms:.2f} ms {what}"
        for ms, what in (
            (cpu_issue, "of Python and autograd around them (module calls, measured)"),
            (p.dram_refetch_ms, "from DRAM (cache note)"),
            (p.llc_refetch_ms, "from the last-level cache (L2 note)"),
            (p.conv_sequence_ms, "of convolutions run in turn (convolutions note)"),
            (p.overhead_ms, "measured null step"),
        )
        if ms
    ]
    print(f"  step   {p.step_seconds * 1e3:10.2f} ms   ({', '.join(parts)})")
    if p.parallel is not None:
        par = p.parallel
        print(
            f"         {par['compute_ms']:10.2f} ms of one GPU's compute; {par['comm_ms']:.2f} ms of {par['collectives']} collectives, {100 * par['hidden_share']:.0f} % hidden behind it"
        )
        print(
            f"         {par['exposed_ms']:10.2f} ms of communication exposed; {par['sync_ms']:.2f} ms of synchronisation (learned from measured multi-GPU steps)"
        )
    if p.host_issue_ms and hw.kind != "cpu":
        gpu_ms = sum(p.family_ms.values())
        print(f"         {gpu_ms:10.2f} ms of device work; the host issues the ops in {p.host_issue_ms:.2f} ms, alongside")
    if p.epoch_seconds is not None:
        per_step = args.batch_size * args.grad_accum * (p.parallel["gpus"] * p.parallel["nodes"] // p.parallel["tp"] if p.parallel is not None else 1)
        print(f"  epoch  {p.epoch_seconds:10.2f} s   ({p.steps_per_epoch} optimizer steps of {per_step})")
    per_gpu = " per GPU" if p.parallel is not None else ""
    if p.memory_bytes is None:
        print("  memory        not predicted (see the note)")
    else:
        print(f"  memory {mem_bytes / GIB:10.2f} GiB predicted peak{per_gpu}" + ("" if fit is None else ("  (fits)" if fit else "  (DOES NOT FIT)")))
    print("  time by op family:  " + ", ".join(f"{f} {100 * v:.0f} %" for f, v in p.family_share.items() if v >= 0.005))
    how = ", ".join(f"{k} {100 * v:.0f} %" for k, v in sorted(p.estimate_share.items()))
    print(
        f"  estimated by:       {how}  (model: a measured family; analogy: a related family's model; unit: its family's model on a sibling unit's kernels; roofline: none)"
    )
    print("  slowest ops:")
    for r in p.top_ops:
        print(f"    {r['module'][:28]:28} {r['op'][:26]:26} {r['phase'][:8]:8} {r['predicted_ms']:9.3f} ms  {r['estimate']}")
    for n in p.notes:
        print(f"  note: {n}")


def _cmd_predict_layers(args: argparse.Namespace) -> None:
    import polars as pl

    from prenet.api import predict_layers
    from prenet.data.io import write_table

    src = Path(args.input)
    if not src.is_file():
        raise PrenetError(f"input file {src} does not exist")
    try:
        table = pl.read_csv(src, infer_schema_length=0)  # strings: each cell is checked and reported by row
    except Exception as e:  # noqa: BLE001
        raise PrenetError(f"{src} is not a readable CSV: {e}") from e
    out = predict_layers(table, hardware=args.hardware, threads=args.threads, models_dir=args.models)
    # 4 significant figures: the model's errors are percents, so the 17 digits of a float64 only look precise
    write_table(out.with_columns(pl.col("predicted_ms").round_sig_figs(4)), args.output)  # atomic: no partial file on failure
    print(f"wrote {len(out)} predictions to {args.output}")
    from prenet.hardware import resolve
    from prenet.hardware.power import power_note
    from prenet.steptime.efficiency import EfficiencyModel

    hw = resolve(args.hardware, threads=args.threads, local_record=artifact_path("hardware_record"))
    model = EfficiencyModel.load(args.models)
    if (speed := model.at_host_speed(hw)) is not None:  # this process's probes: the factor the table was answered at
        print(f"note: {speed.note()}")
    if args.hardware != "local" and (note := power_note(hw, measured=model.measured(hw))):
        print(f"note: {note}")


def _convergence_task(args: argparse.Namespace):
    """The task named by ``--task`` in conf/convergence (or in the ``--config`` YAML file), with the file's ``run:``."""
    from omegaconf import OmegaConf

    from prenet.convergence.query import pick_task

    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise PrenetError(f"config file {path} does not exist")
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        tasks = raw.get("tasks", raw) if isinstance(raw, dict) else {}
        run = raw.get("run", {}) if isinstance(raw, dict) else {}
    else:
        from pipeline.config import compose

        cfg = rooted(compose([f"convergence={args.convergence}"]))
        tasks, run = OmegaConf.to_container(cfg.convergence.tasks, resolve=True), {}
    return pick_task(tasks, args.task, args.config or f"conf/convergence/{args.convergence}.yaml"), run


def _cmd_predict_convergence(args: argparse.Namespace) -> None:
    from prenet.convergence.query import SETTINGS, answer, fine_tune_settings, render

    task, run = _convergence_task(args)
    res = answer(
        task,
        fine_tune_settings(task, {k: getattr(args, k) for k in SETTINGS}, run),
        eps=args.eps,
        target_loss=args.target_loss,
        target_accuracy=args.target_accuracy,
        pretrained=args.pretrained,
        seed=args.seed,
        subset=args.subset,
        correction=args.correction,
        probe=args.probe,
        ntk=args.ntk,
        max_gib=args.max_gib,
        threads=args.threads,
    )
    print(json.dumps(res, indent=2, default=float) if args.json else render(res))


def _cmd_predict_outcome(args: argparse.Namespace) -> None:
    from prenet.outcome.predict import predict_file, render_outcome

    out, warned = predict_file(args.telemetry, domain=args.domain, schedule=args.schedule, models_dir=args.models)
    for w in warned:
        print(f"warning: {w}", file=sys.stderr)
    print(json.dumps({**out.to_dict(), "advice_only": True}, indent=2) if args.json else render_outcome(out))


def _prices(args: argparse.Namespace) -> dict:
    """The pricing of ``--pricing`` (a conf/pricing/ option or a YAML file) with the ``--price NAME=USD`` overrides."""
    from pipeline.config import CONF_DIR
    from prenet.planner.pricing import catalog_keys, check_prices, load_prices

    src = Path(args.pricing)
    if not src.is_file():
        src = CONF_DIR / "pricing" / f"{args.pricing}.yaml"
        if not src.is_file():
            known = ", ".join(sorted(p.stem for p in (CONF_DIR / "pricing").glob("*.yaml")))
            raise PrenetError(f"--pricing {args.pricing!r} is neither a file nor an option of conf/pricing/ (options: {known})")
    prices = load_prices(src)
    for item in args.price or []:
        name, sep, usd = item.rpartition("=")
        if not sep or not name:
            raise PrenetError(f'--price {item!r}: expected NAME=USD_PER_HOUR, e.g. --price "H100 SXM5 80GB=2.49"')
        from prenet.hardware.catalog import alias_note

        priced = catalog_keys(check_prices({name.strip(): usd.strip()}, "--price"), "--price")  # unknown GPUs stop here
        if (note := alias_note(name.strip())) is not None:
            print(f"note: --price {note}", file=sys.stderr)
        prices.update(priced)
    return prices


def _cmd_plan(args: argparse.Namespace) -> None:
    from prenet.planner.plan import load_finetune_data, make_plan
    from prenet.planner.render import render_table

    targets = {k: getattr(args, k) for k in ("converge_eps", "target_loss", "target_accuracy") if getattr(args, k) is not None}
    if len(targets) > 1:
        raise PrenetError(f"give one convergence target, got {', '.join('--' + k.replace('_', '-') for k in targets)}")
    target, value = next(iter(targets.items())) if targets else (None, None)
    finetune = None
    if target is not None:
        if not args.finetune_data:
            raise PrenetError(
                f"--{target.replace('_', '-')} runs the convergence forecast on a fine-tuning set: give --finetune-data FILE "
                "(.pt of {'inputs': tensor, 'labels': tensor} or .npz with inputs, labels)"
            )
        if args.lr is None:
            raise PrenetError("the convergence forecast needs the fine-tuning learning rate: give --lr")
        import torch  # the forecast computes on this CPU: at --threads (a stored trace needs no torch)

        torch.set_num_threads(args.threads)
        x, y = load_finetune_data(args.finetune_data)
        finetune = {
            "inputs": x,
            "labels": y,
            "lr": args.lr,
            "loss": args.loss,
            "max_steps": args.max_steps,
            "subset": args.subset,
            "max_gib": args.max_gib,
        }
    zoo_kwargs = _zoo_kwargs(args)
    plan = make_plan(
        args.model,
        batch_size=args.batch_size,
        zoo_kwargs=zoo_kwargs,
        precision=args.precision,
        dataset_size=args.dataset_size,
        epochs=args.epochs,
        steps=args.steps,
        target=target,
        target_value=value,
        finetune=finetune,
        hardware=args.hardware,
        optimizer=args.optimizer,
        fused=args.fused,
        memory_format=args.memory_format,
        grad_accum=args.grad_accum,
        checkpointing=args.checkpointing,
        momentum=args.momentum,
        prices=_prices(args),
        models_dir=args.models,
        intervals_dir=args.intervals,
        threads=args.threads,
        overhead_path=args.overhead,
        local_record=artifact_path("hardware_record"),
        gpus=args.gpus or [1, 2, 4, 8],
        nodes=args.nodes,
        parallel=args.parallel,
        network_gbits=args.network,
    )
    rows = plan.sorted(args.sort)
    if args.json:
        d = plan.to_dict()
        d["rows"] = [r.__dict__ for r in rows]
        d["sort"] = args.sort
        print(json.dumps(d, indent=2, default=float))
        return
    print(render_table(plan, rows))


def _cmd_report(args: argparse.Namespace) -> None:
    from pipeline.config import compose
    from pipeline.report import report

    out = report(rooted(compose(args.overrides or [])))
    print(f"open {out['html']} in a browser (self-contained: no network needed)")


def _cmd_schedule(args: argparse.Namespace) -> None:
    from contextlib import nullcontext

    from pipeline.config import compose

    compose(args.overrides or [], Path(args.repo).resolve() / "conf")  # a bad override: one line, before any server
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipeline.flows import retrain, start_local_server  # sets the environment defaults of the servers it starts

    try:  # a bad cron expression: one line, before any server (Prefect's own check is a pydantic traceback at serve)
        CronSchedule(cron=args.cron)
    except ValueError as e:
        fields = len(args.cron.split())
        raise PrenetError(
            f"--cron {args.cron!r} is not a cron expression: "
            + (
                "a field is not a value in its range (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6)"
                if fields == 5
                else f"{fields} fields"
            )
            + '; give five fields (minute hour day-of-month month day-of-week), e.g. "0 3 * * 0" (Sundays 03:00)'
        ) from e

    server = None
    ctx = nullcontext()
    if not PREFECT_API_URL.value():
        server, url = start_local_server()
        ctx = temporary_settings(updates={PREFECT_API_URL: url})
        print(f"no Prefect server configured: started a local one at {url} (it stops with this process)")

    try:
        with ctx:
            print(f"serving flow 'prenet-retrain' as deployment {args.name!r} on cron {args.cron!r} (Ctrl-C stops)")
            retrain.serve(  # limit=1: one retrain at a time (each rewrites params.yaml and runs dvc in the same repo)
                name=args.name,
                cron=args.cron,
                parameters={"repo_dir": str(Path(args.repo).resolve()), "overrides": args.overrides or None},
                limit=1,
            )
    finally:
        if server is not None:
            server.terminate()


def _cmd_distribute(args: argparse.Namespace) -> None:
    from pipeline.config import load_params
    from pipeline.distribute import coordinate_merge, distribute, setup
    from pipeline.shards import WORK

    cfg = load_params(Path(args.repo).resolve() / "params.yaml")
    hardware = args.hardware or list(cfg.distribute.hardware)
    if args.work == "setup":
        info = setup(cfg, hardware)
        print(
            f"work pool {info['pool']!r} (process) with queues {', '.join(info['queues'])}; deployment {info['deployment']}; "
            f"automations: {'; '.join(info['automations'])}"
        )
        print(f"start one worker per machine: PRENET_HARDWARE=<hw> prefect worker start --pool {info['pool']} --work-queue <hw> --limit 1")
        return
    if args.work == "merge":
        if not args.what:
            raise PrenetError("`prenet distribute merge` needs the work to merge: benchmark, corpus or finetune")
        for kind in WORK[args.what]:
            print(coordinate_merge(kind, Path(args.repo).resolve()).strip().splitlines()[-1])
        return
    shards = args.shards if args.shards is not None else len(cfg.distribute.shards)
    out = distribute(
        cfg,
        args.work,
        hardware,
        shards,
        wait=not args.no_wait,
        timeout_s=args.timeout,
        repo_dir=str(Path(args.repo).resolve()) if args.worker_repo else None,
        coordinator_dir=Path(args.repo).resolve(),
    )
    for name, fid in out.get("flow_runs", {}).items():
        print(f"{name}: flow run {fid} {out['states'].get(name, 'submitted').lower()}")
    if out["merged"]:
        print(f"merged on this machine: {', '.join(out['merged'])}")


_FUSED_HELP = (
    "the optimizer step as torch.optim.*(fused=True) runs it: one fused kernel over every parameter "
    "(default: torch's default, foreach kernels on a GPU, per-tensor ops on a CPU)"
)


_MEMORY_FORMAT_HELP = (
    "layout of the model's and the batch's 4-D tensors: contiguous (NCHW, torch's default; on a GPU, FP16/BF16 "
    "convolutions carry cuDNN's layout transposes) or channels_last (NHWC); default: contiguous"
)


_GRAD_ACCUM_HELP = (
    "gradient accumulation: K micro-steps of --batch-size (forward + backward) per optimizer step; times are per "
    "optimizer step and epochs count batch x K samples per step (default 1)"
)


_CHECKPOINTING_HELP = (
    "activation checkpointing: each block of the model's repeated stack (a transformer's layers, a ResNet's stages) is "
    "recomputed in the backward pass and keeps only its inputs (more time, less memory)"
)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--batch-size``, ``--model-arg`` and ``--seq-len``: how `predict step-time` and `plan` name the model."""
    p.add_argument(
        "--model",
        required=True,
        help="zoo name (mlp, vgg16, resnet18, resnet50, lstm_lm, bert_base_like, gpt2_small_like, ...), "
        "torchvision:NAME (any torchvision classifier: resnet50, convnext_tiny, vit_b_16, ...), timm:NAME (any timm "
        "architecture: efficientnet_b3, vit_base_patch16_224, ...; both at the image size they were designed for or "
        "--model-arg image_size=N), hf:MODEL_TYPE (transformers' default "
        "config: gpt2, llama, bert, mistral, ...) or hf:path/to/config.json (built by transformers on meta; sequence length "
        "512 or --seq-len N) or path/to/file.py:function returning (module, example_batch)",
    )
    p.add_argument("--batch-size", type=_positive, required=True, help="samples per step (a positive integer)")
    p.add_argument(
        "--model-arg",
        "--zoo-arg",
        dest="zoo_arg",
        action="append",
        metavar="KEY=VALUE",
        help="a model's size or setting (repeatable), e.g. image_size=224, classes=1000, layers=12, seq_len=512; for hf: "
        "models any config field, e.g. num_hidden_layers=16; for timm: and torchvision: any builder keyword, e.g. "
        "drop_path_rate=0.1; the zoo's defaults are CPU-sized (prenet/zoo.py)",
    )
    p.add_argument("--seq-len", type=_positive, metavar="N", help="tokens per sample of a text model (hf: configs default to 512)")


def _add_parallel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=_positive, default=1, metavar="N", help="GPUs per node (default 1); --batch-size is per GPU (per tp:K group)")
    p.add_argument("--nodes", type=_positive, default=1, metavar="M", help="nodes of --gpus GPUs each (default 1)")
    p.add_argument(
        "--parallel",
        default="ddp",
        metavar="ddp|fsdp|tp:K",
        help="how the GPUs share the job: ddp (DistributedDataParallel, default: bucketed gradient all-reduce overlapped "
        "with the backward) | fsdp (ZeRO-3: parameters, gradients and optimizer state sharded) | tp:K (Megatron tensor "
        "parallelism of the transformer blocks over K GPUs of a node, data parallel over the rest)",
    )
    p.add_argument(
        "--network", type=_positive_float, metavar="GBITS", help="network bandwidth per node between nodes, Gb/s (e.g. 100, 200, 400; default 200)"
    )


class _Parser(argparse.ArgumentParser):
    """argparse with the project's errors: one line on stderr, exit 2 — what was wrong, where (the command) and how to
    fix it (its ``--help``), without the usage block argparse prints first. Sub-commands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="prenet", description="Predict a training job's time, steps and success before paying for it.")
    sub = ap.add_subparsers(dest="command", required=True)

    hw = sub.add_parser("hardware", help="list the hardware catalog or show one device's spec")
    hw.add_argument("action", choices=["list", "show"], help="list: every catalog device; show: one device's spec as JSON")
    hw.add_argument("name", nargs="?", help="catalog name (case-insensitive), 'local' or a spec.yaml path")
    hw.add_argument("--threads", type=_threads, default=1, help="threads, for 'local' (default 1)")
    hw.set_defaults(func=_cmd_hardware)

    ms = sub.add_parser("models", help="list the names --model takes: zoo, torchvision:, timm: or hf: (model types)")
    from prenet.model_sources import SOURCES

    ms.add_argument("source", choices=list(SOURCES), help="where the model comes from")
    ms.add_argument("pattern", nargs="?", default="*", help="shell-style name pattern, e.g. '*convnext*' (default: all)")
    ms.add_argument("--all", action="store_true", help="hf: every model type, each that fails with its reason (default: those that answer)")
    ms.set_defaults(func=_cmd_models)

    from prenet.names import CORRECTIONS, LOSSES, MEMORY_FORMATS, NTK_METHODS, OPTIMIZERS, PRECISIONS, SCHEDULES

    pr = sub.add_parser("predict", help="predict step times or steps to converge")
    psub = pr.add_subparsers(dest="what", required=True)
    st = psub.add_parser("step-time", help="one training step (and epoch) of a model on a hardware target")
    _add_model_args(st)
    st.add_argument("--hardware", default="local", help="catalog name, 'local' or spec.yaml (default: local)")
    st.add_argument(
        "--optimizer",
        choices=list(OPTIMIZERS),
        default="sgd",
        help="optimizer of the step: sgd, momentum (SGD, 0.9), nesterov (SGD, Nesterov 0.9), adam, adamw (decoupled decay 0.01); default: sgd",
    )
    st.add_argument("--fused", action="store_true", help=_FUSED_HELP)
    st.add_argument("--memory-format", choices=list(MEMORY_FORMATS), default="contiguous", help=_MEMORY_FORMAT_HELP)
    st.add_argument("--grad-accum", type=_positive, default=1, metavar="K", help=_GRAD_ACCUM_HELP)
    st.add_argument("--checkpointing", action="store_true", help=_CHECKPOINTING_HELP)
    st.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="fp32",
        help="fp32 (default: as torch runs it, cuDNN convolutions/RNNs on TF32 tensor cores where the GPU has them, GEMMs IEEE FP32) "
        "| tf32 (GEMMs on TF32 too) | fp16 / bf16 (autocast, FP32 master weights)",
    )
    st.add_argument("--dataset-size", type=_positive, help="samples per epoch (a positive integer; gives epoch_seconds)")
    _add_parallel_args(st)
    st.add_argument("--threads", type=_threads, default=1, help="CPU threads (for local)")
    _add_host_speed_arg(st)
    st.add_argument("--models", default=str(artifact_path("models_ops")), help="op-level step-time models (default: %(default)s)")
    st.add_argument("--json", action="store_true", help="print the prediction as JSON")
    st.set_defaults(func=_cmd_predict_step_time)
    pl_ = psub.add_parser("layers", help="one prediction per row of a layer CSV (format: docs/step_time.md, 'Layer CSV')")
    pl_.add_argument("--hardware", required=True, help="catalog name, 'local' or spec.yaml")
    pl_.add_argument("--input", required=True, help="CSV: op, the op's shape columns, direction, dtype[, optimizer]")
    pl_.add_argument("--output", required=True, help="CSV written atomically: the input plus predicted_ms")
    pl_.add_argument("--threads", type=_threads, default=1, help="CPU threads (for local; 1 to this machine's CPU count)")
    _add_host_speed_arg(pl_)
    pl_.add_argument("--models", default=str(artifact_path("models_ops")), help="op-level step-time models (default: %(default)s)")
    pl_.set_defaults(func=_cmd_predict_layers)

    cv = psub.add_parser("convergence", help="steps to a target loss/accuracy of fine-tuning, from the NTK (no training)")
    cv.add_argument("--task", help="task name in conf/convergence/<--convergence>.yaml or in --config")
    cv.add_argument("--config", help="YAML file with 'tasks:' (same format as conf/convergence/quick.yaml) and optional 'run:' settings")
    cv.add_argument("--convergence", default="quick", help="config of conf/convergence to read tasks from (default: quick)")
    cv.add_argument(
        "--pretrained",
        default=str(artifact_path("pretrained")),
        help="folder of pre-trained weights (made if missing; default: %(default)s)",
    )
    cv.add_argument("--loss", choices=list(LOSSES), help="training loss (default: the task's)")
    cv.add_argument("--lr", type=_positive_float, help="SGD learning rate (default: the task's)")
    cv.add_argument("--momentum", type=_momentum, help="SGD momentum in [0, 1) (default: the task's)")
    cv.add_argument(
        "--batch-size", type=_positive, help="samples per step (required unless the --config file's run: sets it; the full set when larger)"
    )
    cv.add_argument("--steps", type=_positive, help="horizon in optimizer steps (required unless the --config file's run: sets it)")
    cv.add_argument(
        "--subset",
        type=int,
        default=None,
        help="samples the NTK is computed on (default: chosen from the samples, classes, steps and the 30x cost target)",
    )
    cv.add_argument(
        "--correction",
        choices=list(CORRECTIONS),
        default="trajectory",
        help="how the forecast follows a moving kernel: re-linearize along its own trajectory (default, no training), "
        "a real fine-tuning probe, or none",
    )
    cv.add_argument("--probe", type=float, default=0.05, help="fraction of steps of the real drift probe (--correction probe)")
    cv.add_argument("--eps", type=float, default=0.1, help="relative convergence threshold (default 0.1)")
    cv.add_argument("--target-loss", type=float, help="also answer the steps until the training loss <= this (> 0)")
    cv.add_argument("--target-accuracy", type=float, help="also answer the steps until the training accuracy >= this, in (0, 1]")
    cv.add_argument("--ntk", choices=sorted(NTK_METHODS), default="auto", help="NTK estimator (default: auto)")
    cv.add_argument("--max-gib", type=float, default=4.0, help="memory allowed for the Jacobian and kernel (GiB, default 4)")
    cv.add_argument("--seed", type=int, default=0, help="seed of the head initialisation and the batch order (default 0)")
    cv.add_argument("--threads", type=_threads, default=1, help="CPU threads for the forecast (1 to this machine's CPU count)")
    cv.add_argument("--json", action="store_true", help="print the forecast as JSON")
    cv.set_defaults(func=_cmd_predict_convergence)

    oc = psub.add_parser("outcome", help="final accuracy, failure and rank of a run from its first epochs' telemetry (advice)")
    oc.add_argument(
        "--telemetry",
        required=True,
        help="run.csv or run.parquet: one row per epoch, numbered from 1 (prenet.telemetry.Recorder.table(), or a plain "
        "training log): columns epoch, train_loss, train_accuracy (accuracies as fractions) and, when you have them, "
        "val_loss, val_accuracy and the Recorder's probes (docs/early_success.md lists them); a diverged run's NaN or "
        "inf loss reads as empty",
    )
    oc.add_argument("--domain", help="architecture_dataset domain of the run (e.g. cnn_fashion); unknown or absent: answered as an unknown domain")
    oc.add_argument(
        "--schedule", choices=list(SCHEDULES), help="the run's learning-rate schedule for the epochs to come (optional; sharpens the answer)"
    )
    oc.add_argument("--models", default=str(artifact_path("outcome_models")), help="trained early-success models (default: %(default)s)")
    oc.add_argument("--json", action="store_true", help="print the prediction as JSON")
    oc.set_defaults(func=_cmd_predict_outcome)

    pn = sub.add_parser(
        "plan",
        help="what a training job costs on each hardware option: step time, steps, wall time, cost, memory",
        description="Predict step time, steps, wall time, cost and memory fit of a training job on every hardware "
        "option, with intervals from the predictors' measured holdout errors.",
    )
    _add_model_args(pn)
    pn.add_argument("--dataset-size", type=_positive, help="training samples (one epoch); default with a target: the fine-tuning set's size")
    how = pn.add_mutually_exclusive_group()
    how.add_argument("--epochs", type=float, help="epochs over --dataset-size samples")
    how.add_argument("--steps", type=_positive, help="optimizer steps")
    how.add_argument("--converge-eps", type=float, help="forecast the steps until |L_t - L_T| <= eps (L_0 - L_T), T = --max-steps")
    how.add_argument("--target-loss", type=float, help="forecast the steps until the training loss <= this")
    how.add_argument("--target-accuracy", type=float, help="forecast the steps until the training accuracy >= this")
    pn.add_argument("--finetune-data", help="fine-tuning set for a target: .pt {'inputs', 'labels'} or .npz (inputs, labels)")
    pn.add_argument("--lr", type=_positive_float, help="fine-tuning learning rate (needed with a target)")
    pn.add_argument("--momentum", type=_momentum, default=0.0, help="SGD momentum (forecast, the step's momentum update and its buffer; default 0)")
    pn.add_argument("--loss", choices=list(LOSSES), default="cross_entropy", help="fine-tuning loss of the forecast (default: %(default)s)")
    pn.add_argument("--max-steps", type=int, default=2000, help="forecast horizon (default 2000)")
    pn.add_argument(
        "--subset",
        type=int,
        default=None,
        help="samples the NTK is computed on (default: chosen from the samples, classes, steps and the 30x cost target)",
    )
    pn.add_argument("--max-gib", type=float, default=4.0, help="memory allowed for the NTK (GiB, default 4)")
    pn.add_argument(
        "--hardware", nargs="+", action="extend", help="hardware to plan for (default: local and the whole catalog; see `prenet hardware list`)"
    )
    pn.add_argument(
        "--gpus",
        type=_positive,
        nargs="+",
        action="extend",  # --gpus 1 --gpus 8 as --gpus 1 8 (a repeated flag no longer drops the first); None: 1 2 4 8
        metavar="N",
        help="GPU counts per node planned for every GPU (default: 1 2 4 8); --batch-size is per GPU",
    )
    pn.add_argument("--nodes", type=_positive, default=1, metavar="M", help="nodes of each multi-GPU option (default 1)")
    pn.add_argument(
        "--parallel",
        default="ddp",
        metavar="ddp|fsdp|tp:K",
        help="how the GPUs share the job (default: ddp); tp:K plans only the GPU counts K divides",
    )
    pn.add_argument("--network", type=_positive_float, metavar="GBITS", help="network bandwidth per node between nodes, Gb/s (default 200)")
    pn.add_argument("--optimizer", choices=list(OPTIMIZERS), default="sgd", help="optimizer of the job (default: sgd)")
    pn.add_argument("--fused", action="store_true", help=_FUSED_HELP)
    pn.add_argument("--memory-format", choices=list(MEMORY_FORMATS), default="contiguous", help=_MEMORY_FORMAT_HELP)
    pn.add_argument("--grad-accum", type=_positive, default=1, metavar="K", help=_GRAD_ACCUM_HELP)
    pn.add_argument("--checkpointing", action="store_true", help=_CHECKPOINTING_HELP)
    pn.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="fp32",
        help="fp32 (default, as torch runs it: cuDNN on TF32 where the GPU has it) | tf32 | fp16 | bf16 (autocast); GPUs without the unit are listed with a note",
    )
    pn.add_argument("--pricing", default="on_demand", help="conf/pricing/ option or a YAML file of prices (default: %(default)s)")
    pn.add_argument("--price", action="append", metavar="NAME=USD", help="override one price per GPU-hour (repeatable)")
    pn.add_argument("--sort", choices=["cost", "time", "name"], default="cost", help="ranking (default: cost; unpriced and not fitting last)")
    pn.add_argument("--models", default=str(artifact_path("models_ops")), help="op-level step-time models (default: %(default)s)")
    pn.add_argument(
        "--intervals",
        default=str(artifact_path("intervals")),
        help="measured errors of the run that trained them, behind the intervals (default: %(default)s)",
    )
    pn.add_argument(
        "--overhead",
        default=str(artifact_path("step_overhead")),
        help="measured per-step overhead of the local CPU, added to its step time when the file exists (default: %(default)s)",
    )
    pn.add_argument("--threads", type=_threads, default=1, help="CPU threads (for local; 1 to this machine's CPU count)")
    _add_host_speed_arg(pn)
    pn.add_argument("--json", action="store_true", help="print the plan as JSON")
    pn.set_defaults(func=_cmd_plan)

    rp = sub.add_parser("report", help="render data/report/index.html and its figures from the records of the last run")
    rp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. paths.report=/tmp/report")
    rp.set_defaults(func=_cmd_report)

    rt = sub.add_parser("retrain", help="run the Prefect retrain flow once (every stage through dvc repro)")
    rt.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. predictor=mlp experiment=tiny")
    rt.add_argument("--repo", default=".", help="project folder (default: .)")
    rt.set_defaults(func=_cmd_retrain)

    sc = sub.add_parser("schedule", help="serve the retrain flow on a cron schedule")
    sc.add_argument("--cron", required=True, help='cron expression, e.g. "0 3 * * 0" (Sundays 03:00)')
    sc.add_argument("--name", default="prenet-retrain-scheduled", help="deployment name")
    sc.add_argument("--repo", default=".", help="project folder (default: .)")
    sc.add_argument("overrides", nargs="*", help="Hydra overrides applied on every scheduled run")
    sc.set_defaults(func=_cmd_schedule)

    ds = sub.add_parser(
        "distribute",
        help="fan benchmark, corpus or fine-tune work out over machines (Prefect work pool `prenet`)",
        description="`setup` creates the work pool, one queue per hardware id, the shard deployment and the crash "
        "automations; `benchmark|corpus|finetune` submit one flow run per shard and (by default) wait and merge "
        "here; `merge WORK` only merges (dvc repro --pull). Needs a running Prefect server (PREFECT_API_URL).",
    )
    ds.add_argument("work", choices=["setup", "benchmark", "corpus", "finetune", "merge"], help="what to do")
    ds.add_argument("what", nargs="?", choices=["benchmark", "corpus", "finetune"], help="for `merge`: which work to merge")
    ds.add_argument(
        "--hardware", nargs="+", action="extend", metavar="HW", help="hardware ids, one work queue each (default: distribute.hardware of params.yaml)"
    )
    ds.add_argument("--shards", type=_positive, help="shards per hardware id (default: as many as distribute.shards of params.yaml)")
    ds.add_argument("--no-wait", action="store_true", help="submit and return (not for corpus, whose second phase needs the first merged)")
    ds.add_argument("--timeout", type=float, default=24 * 3600, help="seconds to wait for the shards (default 86400)")
    ds.add_argument("--repo", default=".", help="project folder whose params.yaml holds the matrix (default: .)")
    ds.add_argument("--worker-repo", action="store_true", help="workers run in this same folder (one machine), not in their PRENET_REPO")
    ds.set_defaults(func=_cmd_distribute)
    return ap


def _number(value: str, ok: Callable[[float], bool], rule: str) -> float:
    """A number option that ``ok`` accepts; else argparse's one-line error with ``rule``."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not ok(x):
        raise argparse.ArgumentTypeError(f"{value}: {rule}")
    return x


def _positive_float(value: str) -> float:
    """A positive, finite number option (a learning rate)."""
    return _number(value, lambda x: 0 < x < float("inf"), "give a number > 0")


def _momentum(value: str) -> float:
    """An SGD momentum: a number in [0, 1)."""
    return _number(value, lambda m: 0 <= m < 1, "give 0 ≤ momentum < 1 (0.9 is usual)")


def _positive(value: str) -> int:
    """A positive integer option (sizes, steps): 0 and negatives are refused, never turned into "0 steps"."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: give a positive integer")
    return n


def _threads(value: str) -> int:
    """``--threads``: an integer from 1 to this machine's CPU count (refused, never clamped)."""

    cores = os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if not 1 <= n <= cores:
        raise argparse.ArgumentTypeError(f"{n} threads: this machine has {cores} CPU(s); give 1 to {cores}")
    return n


def _flags_last(argv: list[str]) -> list[str]:
    """``prenet models hf --all PATTERN`` as ``prenet models hf PATTERN --all``: argparse ends an optional positional
    (the pattern) at the first flag, so a pattern after ``--all`` was refused. Only for ``models``, whose flags take no
    value."""
    if argv[:1] != ["models"]:
        return argv
    head, tail = (argv[1 : argv.index("--")], argv[argv.index("--") :]) if "--" in argv else (argv[1:], [])
    flags = [a for a in head if a.startswith("-")]
    return ["models", *[a for a in head if not a.startswith("-")], *flags, *tail]


def _add_host_speed_arg(p: argparse.ArgumentParser) -> None:
    """``--host-speed``: how this very CPU is answered (:mod:`prenet.host_speed`)."""
    from prenet.host_speed import MODES

    p.add_argument(
        "--host-speed",
        choices=list(MODES),
        default=None,
        help="for this machine's CPU: 'now' scales the answer to the speed a probe reads now against its op benchmark's "
        "(the default, unless $PRENET_HOST_SPEED says otherwise); 'recorded' answers at the op benchmark's speed",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_flags_last(sys.argv[1:] if argv is None else list(argv)))
    if getattr(args, "host_speed", None):  # one setting for every answer of this call (a plan's, a layer table's)
        from prenet.host_speed import ENV

        os.environ[ENV] = args.host_speed
    try:
        args.func(args)
    except (PrenetError, FileNotFoundError) as e:  # an artifact not made yet names the stage that makes it
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader stopped early (`| head`): what it read is the answer
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
