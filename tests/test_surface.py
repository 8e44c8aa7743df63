"""The user-facing surface (issue 15 item 7): every option documented, bad values refused with a reason in one line
(exit 2), aliases that pick one of several devices say which. Cheap checks; the model-dependent cases (a forward that
fails, a header-only CSV, --zoo-arg 0) are in test_predict.py, a text telemetry cell in test_outcome.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pipeline.cli import build_parser, main
from prenet.errors import PrenetError


def _options(parser: argparse.ArgumentParser, path: list[str]):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from _options(sp, [*path, name])
        elif not isinstance(a, argparse._HelpAction):
            yield " ".join(path), "/".join(a.option_strings) or a.dest, a.help


def test_every_cli_option_has_help_text():
    missing = [f"{cmd} {opt}" for cmd, opt, text in _options(build_parser(), ["prenet"]) if not text]
    assert not missing, f"options without help: {missing}"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["predict", "step-time", "--model", "mlp", "--batch-size", "4", "--dataset-size", "-5"], "-5: give a positive integer"),
        (["predict", "step-time", "--model", "mlp", "--batch-size", "0"], "0: give a positive integer"),
        (["plan", "--model", "mlp", "--batch-size", "4", "--steps", "0"], "0: give a positive integer"),
        (["predict", "step-time", "--model", "mlp", "--batch-size", "4", "--threads", "0"], "0 threads"),
        (["distribute", "corpus", "--shards", "0"], "0: give a positive integer"),
    ],
)
def test_bad_numbers_are_refused_not_clamped(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_price_for_a_gpu_not_in_the_catalog_is_refused(capsys):
    assert main(["plan", "--model", "mlp", "--batch-size", "4", "--steps", "10", "--hardware", "T4", "--price", "H300=2.0"]) == 2
    err = capsys.readouterr().err
    assert "unknown hardware 'H300'" in err and "Closest matches" in err and err.strip().count("\n") == 0


def test_an_alias_that_picks_one_of_several_variants_says_which():
    from prenet.hardware.catalog import alias_note

    assert alias_note("h100") == "'h100' means H100 SXM5 80GB; other variants: H100 PCIe (name one to choose it)"
    assert alias_note("H100 SXM5 80GB") is None and alias_note("local") is None


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"n_estimators": "abc"}, "predictor.n_estimators='abc': expected an integer (predictor xgboost, conf/predictor/xgboost.yaml)"),
        ({"n_estimator": 5}, "predictor xgboost has no setting predictor.n_estimator; its settings are n_estimators,"),
        ({"learning_rate": "fast"}, "predictor.learning_rate='fast': expected a number"),
    ],
)
def test_predictor_settings_that_cannot_be_what_they_say_are_refused(settings, message):
    from prenet.recipe.regressors import make_regressor

    with pytest.raises(PrenetError) as e:
        make_regressor("xgboost", **settings, seed=0, n_jobs=1, progress=False)
    assert message in str(e.value)


def test_a_stage_with_a_bad_predictor_setting_is_one_line_exit_2(tiny_cfg):
    """Through the Hydra CLI of the train stage, as `python -m pipeline.train predictor.n_estimators=abc` runs it."""
    from omegaconf import OmegaConf

    from pipeline.config import run_guarded
    from pipeline.train import predictor_params
    from prenet.recipe.regressors import make_regressor

    name, params = predictor_params(OmegaConf.merge(tiny_cfg, {"predictor": {"n_estimators": "abc"}}).predictor, 0, 1)
    with pytest.raises(SystemExit) as e:
        run_guarded(lambda: make_regressor(name, **params))
    assert e.value.code == 2


@pytest.mark.slow  # 20 s to 6 min on 2 cores: `make test-slow` runs it (CI too)
def test_commands_resolve_project_paths_from_any_directory(tmp_path):
    """Run from a folder outside the project: defaults and composed paths point into the project root, and a
    missing artifact is one line naming the project's path (never a traceback, never a cwd-relative path)."""
    import os
    import subprocess
    import sys

    from pipeline.config import compose, rooted
    from prenet.paths import REPO_ROOT, artifact_root

    args = build_parser().parse_args(["plan", "--model", "mlp", "--batch-size", "4", "--steps", "1"])
    defaults_root = Path(artifact_root() or REPO_ROOT)  # conftest points the defaults at an empty PRENET_ARTIFACTS
    for p in (args.models, args.intervals, args.overhead):
        assert Path(p).is_absolute() and Path(p).is_relative_to(defaults_root)
    assert all(Path(v).is_relative_to(REPO_ROOT) for v in rooted(compose([])).paths.values())
    p = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "report", f"paths.report={tmp_path / 'report'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert "Traceback" not in p.stderr
    assert p.returncode == 0 or (p.returncode == 2 and str(REPO_ROOT) in p.stderr and p.stderr.strip().count("\n") == 0), p.stderr
