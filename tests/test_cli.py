"""The `prenet` console script: --help everywhere, one-line errors with a non-zero exit."""

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


def test_hardware_list_and_show(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM5 80GB" in out and "L4" in out
    assert main(["hardware", "show", "l4"]) == 0
    assert '"peak_fp32_tflops": 30.3' in capsys.readouterr().out


def test_schedule_requires_cron():
    proc = _run("schedule")
    assert proc.returncode == 2 and "--cron" in proc.stderr


def test_stage_modules_have_hydra_help():
    proc = subprocess.run([sys.executable, "-m", "pipeline.train", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "predictor" in proc.stdout
