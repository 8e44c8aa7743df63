"""Prefect flows. ``retrain`` runs the DVC stages as Prefect tasks, each through ``dvc repro`` so that
``dvc.lock`` records every output and ``dvc status`` is clean afterwards.

    python -m pipeline.flows                       # one run, defaults (same as `prenet retrain`)
    prenet retrain experiment=tiny                 # one run with Hydra overrides
    prenet schedule --cron "0 3 * * 0"             # serve the flow on a cron schedule
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# before Prefect is imported: its temporary server's usage-analytics heartbeat fights the flow's own SQLite writes and
# prints "database is locked" tracebacks into a retrain that succeeds (a user may still turn it on)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, task  # noqa: E402

from pipeline.config import REPO_ROOT, compose, write_params
from pipeline.stages import STAGES
from prenet.errors import PrenetError

#: Output lines of a failed stage shown in the task's error.
TAIL_LINES = 40


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    return env


class DvcError(PrenetError, RuntimeError):
    """A ``dvc`` command failed: one line (the command, the folder, and why: the failing stage's own one-line
    ``error:`` where a stage said one, else DVC's own error line); ``tail`` keeps the last lines of its output for the
    flow's log."""

    def __init__(self, args: list[str], repo_dir: str | Path, code: int, output: str):
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        # a stage's PrenetError is its one line (pipeline.config.hydra_entry): what is wrong and how to fix it, which
        # DVC's "failed to reproduce" line does not say
        said = next((ln for ln in reversed(lines) if ln.startswith("error:")), None)
        dvcs = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "no output")
        reason = said if said is not None else dvcs
        super().__init__(f"`dvc {' '.join(args)}` failed in {repo_dir} (exit {code}): {reason}")
        self.tail = "\n".join(output.splitlines()[-TAIL_LINES:])


def dvc(args: list[str], repo_dir: str | Path) -> str:
    """Run ``dvc <args>`` in ``repo_dir`` with this interpreter's environment; raise :class:`DvcError` on failure."""
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo_dir, env=_env(), capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise DvcError(args, repo_dir, proc.returncode, out)
    return out


@task(name="compose-params")
def compose_params(repo_dir: str, overrides: list[str]) -> str:
    """Write ``repo_dir``'s ``params.yaml`` from its ``conf/`` + overrides (the composition ``dvc exp run -S``
    performs)."""
    return str(write_params(compose(overrides, Path(repo_dir) / "conf"), Path(repo_dir) / "params.yaml", overrides))


@task(name="dvc-stage")
def run_stage(stage: str, repo_dir: str) -> str:
    """Reproduce one stage with ``dvc repro --single-item`` (skipped by DVC when nothing it depends on changed)."""
    return dvc(["repro", "--single-item", stage], repo_dir)


@task(name="dvc-status")
def pipeline_status(repo_dir: str) -> str:
    return dvc(["status", "dvc.yaml"], repo_dir).strip()


@flow(name="prenet-retrain", log_prints=True)
def retrain(repo_dir: str = str(REPO_ROOT), overrides: list[str] | None = None, benchmark_retries: int = 2) -> dict:
    """Every stage of the main pipeline (:data:`pipeline.stages.STAGES`, in dvc.yaml's order: the layer, op,
    multi-GPU, convergence and early-success chains, then the report), each a task run through DVC.

    ``params.yaml`` is composed first from ``repo_dir``'s ``conf/`` with ``overrides`` (Hydra syntax, e.g.
    ``["predictor=mlp"]``; none: ``conf/`` as it is), so a scheduled run follows edits to ``conf/`` and one run's
    overrides do not outlive it. The benchmark task retries ``benchmark_retries`` times (it resumes from its
    shards). Returns the stages' outputs and the final ``dvc status``.
    """
    compose_params(repo_dir, list(overrides or []))
    logs = {}
    for stage in STAGES:
        t = run_stage.with_options(name=stage, retries=benchmark_retries if stage == "benchmark" else 0, retry_delay_seconds=5)
        logs[stage] = t(stage, repo_dir)
    status = pipeline_status(repo_dir)
    print(f"dvc status: {status}")
    return {"stages": logs, "dvc_status": status}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_server(timeout_s: float = 90.0) -> tuple[subprocess.Popen, str]:
    """Start ``prefect server start`` on a free local port; return the process and its API URL once healthy."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PrenetError(f"`prefect server start` exited with {proc.returncode}; run it by hand to see why")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise PrenetError(f"the local Prefect server did not answer on {url} within {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> None:
    """``python -m pipeline.flows [overrides]``: one retrain, as ``prenet retrain`` runs it (a bad override or a failed
    stage is one line and exit 2)."""
    from pipeline.config import run_guarded

    args = sys.argv[1:] if argv is None else argv

    def run() -> None:
        compose(args)  # a bad override: one line, before Prefect starts a server
        retrain(overrides=args or None)

    run_guarded(run)


if __name__ == "__main__":
    main()
