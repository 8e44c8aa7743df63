"""The `prenet` console script: --help everywhere, one-line errors with a non-zero exit."""

import os
import subprocess
import sys

import pytest

from pipeline.cli import main


def _run(*args):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args", [["--help"], ["hardware", "--help"], ["retrain", "--help"], ["schedule", "--help"]])
def test_help_everywhere(args):
    proc = _run(*args)
    assert proc.returncode == 0 and "usage: prenet" in proc.stdout


def test_unknown_hardware_is_one_clear_line(capsys):
    assert main(["hardware", "show", "H300"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown hardware 'H300'") and "Closest matches" in err and "Traceback" not in err


@pytest.mark.parametrize("threads", ["0", str((os.cpu_count() or 1) + 1), "two"])
@pytest.mark.parametrize("command", [["plan", "--model", "mlp", "--batch-size", "8", "--steps", "3"], ["hardware", "show", "local"]])
def test_threads_out_of_range_are_refused_not_clamped(command, threads, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--threads", threads])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --threads:" in err and ("give 1 to" in err or "not an integer" in err)


@pytest.mark.parametrize(
    "args, says",
    [
        (["predict", "step-time", "--model", "mlp", "--batch-size", "-4", "--hardware", "local"], "--batch-size: -4: give a positive integer"),
        (["predict", "step-time", "--model", "mlp", "--batch-size", "4", "--precision", "fp8"], "invalid choice: 'fp8'"),
        (["predict", "convergence", "--task", "mlp_digits_relabel", "--steps", "0"], "--steps: 0: give a positive integer"),
        (
            ["predict", "step-time", "--model", "mlp", "--batch-size", "4", "--gpus", "8", "--nodes", "2", "--network", "0"],
            "--network: 0: give a number > 0",
        ),
        (["predict", "convergence", "--task", "mlp_digits_relabel", "--lr", "0"], "--lr: 0: give a number > 0"),
        (["predict", "convergence", "--task", "mlp_digits_relabel", "--momentum", "1"], "--momentum: 1: give 0 ≤ momentum < 1"),
    ],
)
def test_a_wrong_argument_is_one_line_with_where_to_look(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and says in err and "usage:" not in err
    assert err.startswith(f"prenet {args[0]} {args[1]}: error: ") and err.rstrip().endswith(f"`prenet {args[0]} {args[1]} --help` lists the options)")


def test_plan_refuses_a_network_that_is_not_positive(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "mlp", "--batch-size", "4", "--gpus", "8", "--nodes", "2", "--network=-5"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--network: -5: give a number > 0" in err


def test_a_model_argument_that_is_not_a_size_is_one_line(capsys):
    argv = ["predict", "step-time", "--model", "torchvision:resnet18", "--batch-size", "2", "--model-arg", "image_size=abc"]
    assert main([*argv, "--hardware", "A100"]) == 2
    err = capsys.readouterr().err
    assert err == "error: torchvision:resnet18: --model-arg image_size=abc: give a positive integer, e.g. --model-arg image_size=224\n"


def test_a_sequence_length_for_an_image_model_is_one_line(capsys):
    argv = ["predict", "step-time", "--model", "torchvision:resnet18", "--batch-size", "2", "--seq-len", "128"]
    assert main([*argv, "--hardware", "A100"]) == 2
    assert capsys.readouterr().err.startswith("error: --seq-len applies to text models (hf:, the zoo's); torchvision:resnet18 is an image")


def test_a_reader_that_stops_early_gets_no_traceback():
    cmd = f"{sys.executable} -m pipeline.cli hardware list | head -1"
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_hardware_list_and_show(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM5 80GB" in out and "L4" in out
    v100 = next(line for line in out.splitlines() if line.startswith("V100 SXM2 "))
    assert v100.rstrip().endswith("fp16") and "bf16" not in v100.split()[-2:]  # a V100 runs fp16, not bf16 or tf32
    assert main(["hardware", "show", "l4"]) == 0
    assert '"peak_fp32_tflops": 30.3' in capsys.readouterr().out


def test_schedule_requires_cron():
    proc = _run("schedule")
    assert proc.returncode == 2 and "--cron" in proc.stderr
    bad = _run("schedule", "--cron", "bogus cron")  # refused in one line before any Prefect server starts
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "is not a cron expression: 2 fields" in bad.stderr
    bad = _run("schedule", "--cron", "0 25 * * 0")  # five fields, one out of its range: says so
    assert bad.returncode == 2 and "a field is not a value in its range (minute 0-59, hour 0-23" in bad.stderr
    bad = _run("retrain", "--repo", "/nonexistent/checkout")  # not a checkout: one line naming what it needs
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "holds no config.yaml: not a prenet checkout's conf/" in bad.stderr


def test_a_stage_module_refuses_a_bad_override_in_one_line():
    for args, says in (
        (["predictor=mlpp"], "Could not find 'predictor/mlpp'"),
        (["predictor.n_estimatorz=3"], "'predictor.n_estimatorz' is not a key of the configuration (did you mean 'predictor.n_estimators'?)"),
        (["thread=2"], "(did you mean 'threads'?)"),  # not Hydra's hint, which adds the misspelt key as a new one
        (["predictor"], "'predictor' is not an override: give key=value"),
        (["--multirun", "predictor=mlp,linear"], "sweeps (--multirun) are not run by a stage"),
    ):
        proc = subprocess.run([sys.executable, "-m", "pipeline.train", *args], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and says in proc.stderr, proc.stderr
    shown = subprocess.run([sys.executable, "-m", "pipeline.train", "--cfg", "job", "predictor=mlp"], capture_output=True, text=True)
    assert shown.returncode == 0 and "name: mlp" in shown.stdout  # Hydra's own flags and their values still pass


def test_stage_modules_have_hydra_help():
    proc = subprocess.run([sys.executable, "-m", "pipeline.train", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "predictor" in proc.stdout


def _task_file(tmp_path):
    f = tmp_path / "task.yaml"
    f.write_text(
        "tasks:\n  tiny_digits:\n    dataset: digits\n    arch: mlp\n    widths: [16]\n"
        "    pretrain: {epochs: 1}\n    finetune: {classes: [0, 1, 2], n_train: 48}\n    lrs: [0.05]\n"
        "run: {loss: cross_entropy, batch_size: 16, steps: 30}\n"
    )
    return f


def test_predict_convergence_from_a_config_file(tmp_path, capsys):
    f = _task_file(tmp_path)
    assert main(["predict", "convergence", "--config", str(f), "--pretrained", str(tmp_path / "pt"), "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "tiny_digits" and out["steps"] == 30 and out["n_train"] == 48
    # the drift is measured, or unknown (None) where every check was skipped for cost: never a 0 that was not measured
    assert out["drift"] is not None or all(r.get("skipped") for r in out["relinearized"])
    assert (tmp_path / "pt" / "tiny_digits.pt").exists()  # pre-trained on first use, reused afterwards
    assert main(["predict", "convergence", "--config", str(f), "--pretrained", str(tmp_path / "pt"), "--target-loss", "1e-9"]) == 0
    text = capsys.readouterr().out
    assert "not reached within 30 steps" in text
    # where no check re-linearized, the kernel's drift at the horizon's end is said beside the checks'
    assert "re-linearized at step" in text or "at the horizon's end (step 30) it had moved" in text
    # a target no curve can reach is one line, exit 2, before any work
    assert main(["predict", "convergence", "--config", str(f), "--pretrained", str(tmp_path / "pt"), "--target-accuracy", "95"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: target accuracy = 95") and "an accuracy in (0, 1]" in err and err.count("\n") == 1


def test_predict_convergence_errors_are_one_line(tmp_path, capsys):
    assert main(["predict", "convergence", "--task", "no_such_task", "--batch-size", "8", "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: task 'no_such_task' is not defined") and "cnn_digits_split" in err
    f = _task_file(tmp_path)
    assert main(["predict", "convergence", "--config", str(f), "--pretrained", str(tmp_path / "pt"), "--ntk", "exact", "--max-gib", "1e-6"]) == 2
    err = capsys.readouterr().err
    assert "NTK too large" in err and "P=" in err and "To fix" in err and "Traceback" not in err


def test_a_stage_started_by_a_python_without_the_dependencies_says_what_to_do():
    """`dvc repro` outside the venv runs the stages with another Python: one line, exit 2, naming the fix."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-S", "-m", "pipeline.run", "benchmark"], cwd=root, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "cannot import" in p.stderr and "source .venv/bin/activate" in p.stderr


def test_models_flags_may_come_before_the_pattern():
    """``prenet models hf --all PATTERN`` reads as ``prenet models hf PATTERN --all``; what follows ``--`` stays put (a
    pattern that starts with '-'); other commands are untouched."""
    from pipeline.cli import _flags_last

    assert _flags_last(["models", "hf", "--all", "b*"]) == ["models", "hf", "b*", "--all"]
    assert _flags_last(["models", "hf", "--all", "--", "-x*"]) == ["models", "hf", "--all", "--", "-x*"]
    assert _flags_last(["models", "--help"]) == ["models", "--help"]
    assert _flags_last(["predict", "step-time", "--model", "mlp"]) == ["predict", "step-time", "--model", "mlp"]


def test_a_repeated_list_option_adds_to_it():
    # a new user's `prenet plan --hardware my_gpu.yaml --hardware L4` planned L4 alone: argparse kept the last flag
    from pipeline.cli import build_parser

    args = build_parser().parse_args(
        ["plan", "--model", "mlp", "--batch-size", "4", "--hardware", "a.yaml", "--hardware", "L4", "T4", "--gpus", "1", "--gpus", "8"]
    )
    assert args.hardware == ["a.yaml", "L4", "T4"] and args.gpus == [1, 8]
    assert build_parser().parse_args(["plan", "--model", "mlp", "--batch-size", "4"]).gpus is None  # the plan's 1 2 4 8
