"""The distributed path under a real fault (``make test-distributed``; marked ``distributed``, not in ``make test``).

A local ``prefect server`` (SQLite), two process workers declaring ``PRENET_HARDWARE=cpu``, and ``moto_server`` as
the DVC S3 remote. One shard of 60 early-success corpus runs is submitted; after k runs are in its scratch, its
worker and the worker's flow-run processes are SIGKILLed. The heartbeat automation marks the run Crashed, the
reschedule automation schedules it again, the other worker finishes it: exactly 60 unique rows, the k rows
written before the kill byte-identical afterwards, and a coordinator checkout restores the shard from the DVC
run-cache (``dvc repro --pull``) without running it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROJECT_FILES

pytestmark = pytest.mark.distributed

REPO = Path(__file__).resolve().parents[1]
COPY = [*PROJECT_FILES, "distributed"]
ITEMS, KILL_AFTER = 60, 12
MATRIX = [
    "experiment=tiny",
    "progress=false",
    "outcome.corpus.domains=[mlp_digits]",
    f"outcome.corpus.runs_per_domain={2 * ITEMS}",
    "outcome.corpus.prior_fraction=0.5",
    "outcome.corpus.enrich.heavy_ball.runs=0",  # the prior runs only: one shard of ITEMS
    "outcome.corpus.enrich.user_loop.runs=0",
    "distribute.hardware=[cpu]",
    "distribute.shards=[0]",
    "distribute.zombie_after_s=45",
]
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def _checkout(dst: Path, params: list[str]) -> Path:
    from conftest import copy_project

    copy_project(dst, COPY)
    subprocess.run([sys.executable, "-m", "pipeline.compose", *params], cwd=dst, check=True, capture_output=True)
    return dst


def _dvc(args: list[str], cwd: Path, env: dict) -> str:
    p = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def _kill_tree(pid: int) -> None:
    import psutil

    procs = psutil.Process(pid).children(recursive=True)
    for p in [psutil.Process(pid), *procs]:
        try:
            os.killpg(os.getpgid(p.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def services(tmp_path, monkeypatch):
    """Prefect server + moto_server, both on free local ports, torn down afterwards."""
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect_home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "DVC_NO_ANALYTICS": "1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    pport, sport = _port(), _port()
    procs = []
    moto = shutil.which("moto_server", path=env["PATH"])
    if moto is None:
        pytest.skip("moto_server is not installed: `make install-distributed`")
    procs.append(
        subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", str(sport)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
    )
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(pport)],
            env=env,
            stdout=open(tmp_path / "server.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )
    api = f"http://127.0.0.1:{pport}/api"
    try:
        _wait_http(f"http://127.0.0.1:{sport}/", 60, procs[0])
        _wait_http(f"{api}/health", 120, procs[1])
        env["PREFECT_API_URL"] = api
        for k in ("PREFECT_HOME", "PREFECT_API_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            monkeypatch.setenv(k, env[k])
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sport}").create_bucket(Bucket="prenet")
        yield env, f"http://127.0.0.1:{sport}"
    finally:
        for p in procs:
            _kill_tree(p.pid)


def _remote(repo: Path, endpoint: str, env: dict) -> None:
    _dvc(["remote", "add", "-d", "store", "s3://prenet/dvc"], repo, env)
    _dvc(["remote", "modify", "store", "endpointurl", endpoint], repo, env)  # credentials come from the environment, never git


def _states(flow_run_id) -> list[str]:
    from prefect import get_client

    async def go():
        async with get_client() as c:
            return [s.type.value for s in sorted(await c.read_flow_run_states(flow_run_id), key=lambda s: s.timestamp)]

    return asyncio.run(go())


def test_killed_shard_is_rescheduled_resumed_and_restored_from_the_run_cache(tmp_path, services):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipeline.config import load_params
    from pipeline.distribute import distribute, setup
    from pipeline.shard import scratch_path
    from prenet.data.shard_files import read_rows

    env, endpoint = services
    work = _checkout(tmp_path / "worker", MATRIX)
    _remote(work, endpoint, env)
    cfg = load_params(work / "params.yaml")
    t0 = time.monotonic()
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        info = setup(cfg, ["cpu"])
        assert info["queues"] == ["cpu"] and len(info["automations"]) == 2
        workers = [_worker(work, env, tmp_path / f"worker{i}.log", f"w{i}") for i in range(2)]
        try:
            res = distribute(cfg, "corpus_prior", ["cpu"], 1, wait=False, repo_dir=str(work))
            ((name, fid),) = res["flow_runs"].items()
            scratch = work / scratch_path(cfg, "corpus_prior", "cpu", 0)
            deadline = time.monotonic() + 240
            while not (scratch.exists() and len(read_rows(scratch)) >= KILL_AFTER):
                assert time.monotonic() < deadline, f"the shard never reached {KILL_AFTER} items: {(tmp_path / 'worker0.log').read_text()[-2000:]}"
                time.sleep(0.2)
            import psutil

            busy = [w for w in workers if any("prefect.engine" in " ".join(c.cmdline()) for c in psutil.Process(w.pid).children(recursive=True))]
            assert len(busy) == 1, "exactly one worker runs the shard"
            _kill_tree(busy[0].pid)
            killed_at = time.monotonic()
            before = [ln for ln in scratch.read_bytes().splitlines(keepends=True) if ln.endswith(b"\n")]
            assert KILL_AFTER <= len(before) < ITEMS
            deadline = time.monotonic() + 420
            while (states := _states(fid))[-1] != "COMPLETED":
                assert states[-1] not in ("FAILED", "CANCELLED"), states
                assert time.monotonic() < deadline, f"not completed: {states}"
                time.sleep(2)
            recovered_s = time.monotonic() - killed_at
        finally:
            for w in workers:
                _kill_tree(w.pid)
    # Crashed → rescheduled → Completed
    assert "CRASHED" in states and states.index("CRASHED") < len(states) - 1
    after_crash = states[states.index("CRASHED") + 1 :]
    assert after_crash[0] == "SCHEDULED" and after_crash[-1] == "COMPLETED", states
    out = work / "data/distributed/shards/corpus_prior/cpu-0.jsonl"
    rows = out.read_bytes().splitlines(keepends=True)
    keys = [json.loads(r)["key"] for r in rows]
    assert len(rows) == ITEMS and len(set(keys)) == ITEMS
    assert set(before) <= set(rows), "rows written before the kill changed"
    finished = scratch.with_name(scratch.name + ".done")  # retired after promotion
    assert len(read_rows(finished)) == ITEMS, "the rescheduled run resumed: no item was run twice"
    # the coordinator: a clean checkout restores the shard from the remote's run-cache, without running it
    coord = _checkout(tmp_path / "coordinator", MATRIX)
    _remote(coord, endpoint, env)
    log = _dvc(["repro", "--pull", "distributed/dvc.yaml:merge_corpus_prior"], coord, {**env, "PRENET_HARDWARE": "coordinator"})
    assert "corpus_prior_shard@cpu-0' is cached" in log, log
    assert "items promoted" not in log
    assert not (coord / "data/scratch").exists()
    merged = read_rows(coord / "data/distributed/corpus_prior.jsonl")
    assert len(merged) == ITEMS
    assert (coord / "data/distributed/shards/corpus_prior/cpu-0.jsonl").read_bytes() == out.read_bytes()
    print(f"fault test: killed after {len(before)} items; recovered in {recovered_s:.0f} s; total {time.monotonic() - t0:.0f} s; states {states}")


def _worker(repo: Path, env: dict, log: Path, name: str) -> subprocess.Popen:
    wenv = {**env, "PRENET_HARDWARE": "cpu", "PRENET_REPO": str(repo), "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}
    return subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", "prenet", "--work-queue", "cpu", "--limit", "1", "--name", name],
        cwd=repo,
        env=wenv,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_corpus_on_two_workers_equals_the_single_machine_corpus(tmp_path, services):
    """Two "machines" (their own checkouts, one worker each) share work only through Prefect and the DVC remote;
    the coordinator's merged corpus equals the `corpus` stage's on one machine, for the same seed (timings aside)."""
    import polars as pl
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipeline.config import load_params
    from pipeline.distribute import distribute, setup

    env, endpoint = services
    # PRENET_DISTRIBUTED_CORPUS_RUNS=N: the default corpus settings (4 domains) with N runs per domain (no take-off or recipe runs), instead of tiny
    runs = os.environ.get("PRENET_DISTRIBUTED_CORPUS_RUNS")
    size = (
        [
            "outcome.corpus.source=generate",
            f"outcome.corpus.runs_per_domain={runs}",
            "outcome.corpus.takeoff_runs=0",
            "outcome.corpus.enrich.heavy_ball.runs=0",
            "outcome.corpus.enrich.user_loop.runs=0",
            "outcome.corpus.overhead_runs=1",
        ]
        if runs
        else ["experiment=tiny"]
    )
    params = [*size, "progress=false", "distribute.hardware=[cpu]", "distribute.shards=[0,1]"]
    machines = [_checkout(tmp_path / f"m{i}", params) for i in range(2)]
    coord = _checkout(tmp_path / "coordinator", params)
    for repo in (*machines, coord):
        _remote(repo, endpoint, env)
    cfg = load_params(coord / "params.yaml")
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        setup(cfg, ["cpu"])
        workers = [_worker(m, env, tmp_path / f"w{i}.log", f"m{i}") for i, m in enumerate(machines)]
        try:
            out = distribute(cfg, "corpus", ["cpu"], 2, wait=True, timeout_s=3600, coordinator_dir=coord)
        finally:
            for w in workers:
                _kill_tree(w.pid)
    assert set(out["states"].values()) == {"COMPLETED"} and len(out["states"]) == 4
    ran_on = {i for i, m in enumerate(machines) if (m / "data/scratch").exists()}
    assert ran_on == {0, 1}, "both machines ran shards"
    assert not (coord / "data/scratch").exists(), "the coordinator restored the shards from the run-cache, it ran none"
    subprocess.run([sys.executable, "-m", "pipeline.run", "corpus"], cwd=coord, env=env, check=True, capture_output=True)
    timing = ["wall_seconds", "recorder_seconds"]
    one = pl.read_parquet(coord / "data/outcome/runs.parquet").drop("split").sort("run_id")
    dist = pl.read_parquet(coord / "data/distributed/corpus/runs.parquet").sort("run_id")
    c = cfg.outcome.corpus
    recipes = sum(int(r.runs) * sum(d in r.domains for d in c.domains) for r in c.enrich.values())  # on the domains each names
    planned = len(c.domains) * (int(c.runs_per_domain) + int(c.takeoff_runs)) + recipes  # prior + boundary + take-off + recipe runs
    assert one.height == planned and one.drop(timing).equals(dist.drop(timing))
    print(f"two-machine corpus: {one.height} runs identical to the single-machine corpus (timings aside)")
    assert (
        pl.read_parquet(coord / "data/outcome/telemetry.parquet")
        .sort("run_id", "epoch")
        .equals(pl.read_parquet(coord / "data/distributed/corpus/telemetry.parquet").sort("run_id", "epoch"))
    )


def test_a_worker_on_other_hardware_refuses(tmp_path):
    """The guard inside the stage: a shard for 'h100' refuses on a machine that declares 'cpu' (one line, exit 2)."""
    work = _checkout(tmp_path / "w", ["experiment=tiny", "progress=false", "distribute.hardware=[h100]", "distribute.shards=[0]"])
    p = subprocess.run(
        [sys.executable, "-m", "pipeline.shard", "corpus_prior", "h100", "0"],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "PRENET_HARDWARE": "cpu"},
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "created for hardware 'h100'" in p.stderr and "Traceback" not in p.stderr
    assert not (work / "data/scratch").exists()


def test_schedule_registers_a_cron_deployment_whose_triggered_run_completes(tmp_path, services):
    """`prenet schedule` against a local server: the deployment carries the cron, and a run triggered on it runs the
    whole retrain flow (tiny config) to Completed."""
    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    env, _ = services
    repo = _checkout(tmp_path / "repo", ["experiment=tiny", "progress=false"])
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "schedule",
            "--cron",
            "0 3 * * 0",
            "--name",
            "nightly",
            "--repo",
            str(repo),
            "experiment=tiny",
            "progress=false",
        ],
        cwd=repo,
        env=env,
        stdout=open(tmp_path / "serve.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    async def deployment():
        async with get_client() as c:
            try:
                return await c.read_deployment_by_name("prenet-retrain/nightly")
            except Exception:
                return None

    try:
        with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
            deadline = time.monotonic() + 120
            while (dep := asyncio.run(deployment())) is None:
                assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the deployment never appeared"
                time.sleep(1)
            assert [s.schedule.cron for s in dep.schedules] == ["0 3 * * 0"]
            fr = run_deployment("prenet-retrain/nightly", timeout=900)
            assert fr.state.is_completed(), (fr.state, (tmp_path / "serve.log").read_text()[-3000:])
    finally:
        _kill_tree(serve.pid)
    assert (repo / "data/report/index.html").exists() and (repo / "dvc.lock").exists()


def test_a_killed_dask_worker_leaves_every_corpus_output_exactly_once(tmp_path, services, monkeypatch):
    """prefect-dask inside a shard: a Dask worker is SIGKILLed mid-corpus; Dask re-runs what it lost, and every
    run's output exists exactly once (one file per run, written once; no temporary file left)."""
    import threading

    from conftest import tiny_overrides
    from dask.distributed import Client, LocalCluster
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipeline.config import compose
    from pipeline.distribute import run_shard_on_dask
    from pipeline.shard import scratch_path
    from prenet.data.shard_files import read_rows

    n = 20
    cfg = compose(
        tiny_overrides(
            tmp_path,
            "outcome.corpus.domains=[mlp_digits]",
            f"outcome.corpus.runs_per_domain={2 * n}",
            "outcome.corpus.enrich.heavy_ball.runs=0",  # the prior runs only: n items
            "outcome.corpus.enrich.user_loop.runs=0",
            "distribute.hardware=[cpu]",
            "distribute.shards=[0]",
            f"distribute.scratch={tmp_path / 'scratch'}",
        )
    )
    monkeypatch.setenv("PRENET_HARDWARE", "cpu")
    folder = scratch_path(cfg, "corpus_prior", "cpu", 0).with_suffix(".items")
    killed: list[int] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:

        def kill_one() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and len(list(folder.glob("*.json"))) < 5:
                time.sleep(0.1)
            pid = next(iter(client.run(os.getpid).values()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        t = threading.Thread(target=kill_one, daemon=True)
        t.start()
        with temporary_settings(updates={PREFECT_API_URL: services[0]["PREFECT_API_URL"]}):
            res = run_shard_on_dask(cfg, "corpus_prior", "cpu", 0, cluster.scheduler_address)
        t.join(5)
    assert killed, "a worker was killed"
    files = sorted(folder.with_name(folder.name + ".done").iterdir())  # retired after promotion
    assert len(files) == n and all(f.suffix == ".json" for f in files), [f.name for f in files]
    rows = read_rows(res["output"])
    assert len(rows) == n and len({r["key"] for r in rows}) == n


def test_an_unreachable_dvc_remote_is_one_line(tmp_path):
    from pipeline.distribute import has_remote
    from prenet.errors import PrenetError

    repo = _checkout(tmp_path / "r", ["experiment=tiny"])
    env = dict(os.environ)
    _dvc(["remote", "add", "-d", "store", "s3://prenet/dvc"], repo, env)
    _dvc(["remote", "modify", "store", "endpointurl", "http://127.0.0.1:9"], repo, env)
    with pytest.raises(PrenetError, match=r"the DVC remote 'store' at http://127.0.0.1:9 does not answer .*dvc remote modify store endpointurl"):
        has_remote(repo)
