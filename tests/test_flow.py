"""The Prefect retrain flow end to end on the tiny config, in a scratch copy of the project: every stage runs
as a task through `dvc repro`, and `dvc status` is clean afterwards."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_FILES

from pipeline.stages import STAGES

REPO = Path(__file__).resolve().parents[1]
COPY = [*PROJECT_FILES, "params.yaml"]


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def scratch_repo(tmp_path):
    from conftest import copy_project

    return copy_project(tmp_path, COPY)


@pytest.mark.slow  # 20 s to 6 min on 2 cores: `make test-slow` runs it (CI too)
def test_retrain_flow_runs_every_stage_through_dvc(prefect_harness, scratch_repo):
    from pipeline.flows import retrain

    result = retrain(repo_dir=str(scratch_repo), overrides=["experiment=tiny", "progress=false"])
    assert list(result["stages"]) == list(STAGES)
    assert "Data and pipelines are up to date" in result["dvc_status"]
    assert (scratch_repo / "dvc.lock").exists()
    assert (scratch_repo / "data" / "report" / "index.html").exists()
    status = subprocess.run([sys.executable, "-m", "dvc", "status"], cwd=scratch_repo, capture_output=True, text=True)
    assert "up to date" in status.stdout


def test_stage_task_plain_function_reports_dvc_failures(scratch_repo):
    """Tasks are testable as plain functions (`task.fn`); a failing stage raises with DVC's output."""
    from pipeline.flows import run_stage

    with pytest.raises(RuntimeError, match="dvc repro --single-item nosuchstage"):
        run_stage.fn("nosuchstage", str(scratch_repo))


def test_a_failing_stage_says_its_own_error_line():
    from pipeline.flows import DvcError

    out = (
        "Running stage 'evaluate_outcome_ooc':\n> python -m pipeline.run evaluate_outcome_ooc\nTraceback (most recent call last):\n"
        "  ...\nerror: data/outcome/out_of_corpus/runs.parquet lacks column 'width'; rerun the corpus stage\n"
        "ERROR: failed to reproduce 'evaluate_outcome_ooc': failed to run: python -m pipeline.run evaluate_outcome_ooc, exited with 2\n"
    )
    e = DvcError(["repro", "--single-item", "evaluate_outcome_ooc"], "/repo", 255, out)
    assert str(e).endswith("(exit 255): error: data/outcome/out_of_corpus/runs.parquet lacks column 'width'; rerun the corpus stage")
    assert "failed to reproduce" in str(DvcError(["repro"], "/repo", 255, out.replace("error: data", "data")))
