"""Fanning work out over machines with Prefect 3 work pools (README "Beyond one machine").

* One process work pool (``distribute.pool``, default ``prenet``) with one work queue per hardware id.
* One worker per machine: ``PRENET_HARDWARE=<hw> prefect worker start --pool prenet --work-queue <hw> --limit 1``,
  started in that machine's checkout (its ``.venv``).
* One deployment, ``prenet-shard/<distribute.deployment>``, of :func:`shard_flow`; one flow run per shard, created
  with ``run_deployment(..., work_queue_name=<hw>)`` (:func:`submit`).
* Each flow run reproduces ``distributed/dvc.yaml:<kind>_shard@<hw>-<k>`` with ``dvc repro --single-item`` and,
  when a DVC remote is configured, ``dvc push --run-cache``. The coordinator merges with ``dvc repro --pull``.
* Crash recovery: flow runs send heartbeats (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``, set in the deployment's job
  variables). Two automations, installed by :func:`setup`, mark a shard whose heartbeats stop as Crashed and move a
  crashed shard back to Scheduled; :func:`shard_flow` fails for good after ``distribute.max_attempts`` runs.
  ``prefect flow-run retry <id>`` is the manual path.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from prefect import flow, task

from pipeline.config import REPO_ROOT
from pipeline.flows import DvcError, dvc
from pipeline.shards import KINDS, WORK
from pipeline.shards import kind as kind_of
from prenet.data.shard_files import HARDWARE_ENV, KEY, check_hardware, item_path, promote_items, retire, shard_slice, write_item
from prenet.errors import PrenetError

FLOW_NAME = "prenet-shard"
#: The checkout a machine's worker runs shards in (default: the one prenet is installed from).
REPO_ENV = "PRENET_REPO"
#: The Prefect states after which a shard flow run will not change again by itself.
FINAL = {"COMPLETED", "FAILED", "CANCELLED"}
ZOMBIE_AUTOMATION = "prenet: crash silent shard runs"
RESCHEDULE_AUTOMATION = "prenet: reschedule crashed shard runs"


def _crashes(flow_run_id: Any) -> int:
    """How many times a flow run has crashed (Crashed states in its history)."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return sum(s.type.value == "CRASHED" for s in client.read_flow_run_states(flow_run_id))


def shard_stage(kind: str, hardware: str, shard: int) -> str:
    """The DVC stage of one shard."""
    return f"distributed/dvc.yaml:{kind}_shard@{hardware}-{shard}"


def has_remote(repo_dir: str | Path) -> bool:
    """Whether the checkout has a default DVC remote (``dvc remote add -d``); if it has, that the remote answers
    (one line naming it and its endpoint otherwise)."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "remote", "default"], cwd=repo_dir, capture_output=True, text=True)
    name = proc.stdout.strip() if proc.returncode == 0 else ""
    if not name:
        return False
    ep = subprocess.run(
        [sys.executable, "-m", "dvc", "config", f"remote.{name}.endpointurl"], cwd=repo_dir, capture_output=True, text=True
    ).stdout.strip()
    if ep:
        try:
            urllib.request.urlopen(ep, timeout=5).close()
        except urllib.error.HTTPError:
            pass  # it answered (an S3 endpoint refuses an anonymous GET)
        except OSError as e:
            raise PrenetError(
                f"the DVC remote {name!r} at {ep} does not answer ({e.__class__.__name__}); start it, or fix it with "
                f"`dvc remote modify {name} endpointurl <url>`"
            ) from None
    return True


@flow(name=FLOW_NAME, log_prints=True)
def shard_flow(kind: str, hardware: str, shard: int, max_attempts: int = 3, repo_dir: str | None = None) -> dict:
    """Run one shard on this machine through DVC and push it (with the run-cache) to the DVC remote, if any.

    Refuses (Failed, never rescheduled) when this machine is not ``hardware`` or once this flow run has crashed
    ``max_attempts`` times. ``repo_dir`` defaults to this machine's ``PRENET_REPO``, else the checkout prenet is installed from.
    A kind that reads another kind's merge (the corpus's boundary phase) first reproduces that merge here with
    ``dvc repro --pull``: its shards come from the remote's run-cache, nothing is re-run."""
    from prefect.runtime import flow_run

    attempt = int(flow_run.run_count or 1)
    crashes = _crashes(flow_run.id) if flow_run.id else 0
    if crashes >= max_attempts:
        raise PrenetError(
            f"{kind}@{hardware}-{shard}: crashed {crashes} times (distribute.max_attempts={max_attempts}); "
            "look at why it crashed, then submit the shard again (`prenet distribute ...`)"
        )
    check_hardware(hardware)
    repo = Path(repo_dir or os.environ.get(REPO_ENV) or REPO_ROOT)
    stage = shard_stage(kind, hardware, shard)
    print(f"{stage}: attempt {attempt} on {os.uname().nodename} ({HARDWARE_ENV}={hardware}) in {repo}")
    for need in kind_of(kind).needs:
        dvc(["repro", "--pull", merge_stage(need)], repo)
    try:
        log = dvc(["repro", "--single-item", stage], repo)
    except DvcError as e:
        print(e.tail)  # the stage's own output, in the flow run's log
        raise
    print(log.strip().splitlines()[-1] if log.strip() else "")
    pushed = has_remote(repo)
    if pushed:
        dvc(["push", "--run-cache", stage], repo)
        print(f"{stage}: pushed with its run-cache")
    else:
        print(f"{stage}: no DVC remote configured; the shard stays on this machine")
    return {"stage": stage, "attempt": attempt, "pushed": pushed}


# ---- Dask inside a shard ------------------------------------------------------------------------------------------


@task(name="shard-item")
def item_task(kind_name: str, key: str, payload: Any, folder: str, initargs: tuple, hardware: str) -> bool:
    """One item on a Dask worker, written to its own file only once (idempotent: Dask may run it again)."""
    k = kind_of(kind_name)
    if item_path(folder, key).exists():
        return False
    if k.initializer is not None:
        k.initializer(*initargs)
    result = k.work(payload)
    return write_item(folder, {KEY: key, "hardware": hardware, **(result if isinstance(result, dict) else {"result": result})})


def run_shard_on_dask(cfg: DictConfig, kind_name: str, hardware: str, shard: int, address: str) -> dict:
    """Shard ``shard`` of ``kind_name`` with its items as Prefect tasks on the Dask cluster at ``address``
    (``prefect-dask``'s ``DaskTaskRunner``), each item written once to its own file under the scratch folder, then
    promoted like :func:`pipeline.shard.run_shard`. The hardware guard applies to this machine (the Dask workers are
    the user's to keep homogeneous)."""
    from prefect_dask import DaskTaskRunner

    from pipeline.shard import scratch_path
    from pipeline.shards import kind, shard_dir, slot

    k = kind(kind_name)
    check_hardware(hardware)
    index, count = slot(cfg, k, hardware, shard)
    mine = shard_slice(k.items(cfg), index, count)
    folder = scratch_path(cfg, kind_name, hardware, shard).with_suffix(".items")
    folder.mkdir(parents=True, exist_ok=True)
    initargs = k.initargs(cfg) if k.initializer else ()

    @flow(name=f"{FLOW_NAME}-dask", task_runner=DaskTaskRunner(address=address))
    def on_dask() -> int:
        futures = [item_task.submit(kind_name, key, payload, str(folder), initargs, hardware) for key, payload in mine]
        return sum(bool(f.result()) for f in futures)

    written = on_dask()
    out = shard_dir(cfg, kind_name) / f"{hardware}-{shard}.jsonl"
    n = promote_items(folder, out, [key for key, _ in mine])
    retire(folder)
    return {"items": n, "written_this_run": written, "output": str(out)}


# ---- server, pool, deployment, automations ------------------------------------------------------------------------


def require_server() -> str:
    """The configured Prefect API URL, once it answers; one line naming the URL and how to start it otherwise."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise PrenetError(
            "no Prefect server is configured: start one with `prefect server start` and point this shell at it with "
            "`prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`"
        )
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=5) as r:
            if r.status == 200:
                return url
    except OSError:
        pass
    raise PrenetError(f"the Prefect server at {url} does not answer; start it with `prefect server start` (or fix PREFECT_API_URL)")


def _automations(deployment_id: str, zombie_after_s: int) -> list[Any]:
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    runs = ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]})
    ours = ResourceSpecification({"prefect.resource.id": [f"prefect.deployment.{deployment_id}"], "prefect.resource.role": "deployment"})
    zombie = Automation(
        name=ZOMBIE_AUTOMATION,
        description="A shard flow run whose heartbeats stop (its machine or process died) is marked Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match=runs,
            match_related=ours,
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=zombie_after_s),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message="no heartbeat: the shard's process or machine died", force=True)],
    )
    reschedule = Automation(
        name=RESCHEDULE_AUTOMATION,
        description="A crashed shard flow run is scheduled again (the flow fails for good after distribute.max_attempts runs).",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=runs,
            match_related=ours,
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[ChangeFlowRunState(state=StateType.SCHEDULED, name="Rescheduled", message="crashed: scheduled again", force=True)],
    )
    return [zombie, reschedule]


async def _setup(cfg: DictConfig, hardware: list[str]) -> dict:
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    d = cfg.distribute
    async with get_client() as client:
        try:
            await client.read_work_pool(str(d.pool))
        except ObjectNotFound:
            await client.create_work_pool(WorkPoolCreate(name=str(d.pool), type="process"))
        queues = []
        for hw in hardware:
            try:
                await client.create_work_queue(name=hw, work_pool_name=str(d.pool))
            except ObjectAlreadyExists:
                pass
            queues.append(hw)
        flow_id = await client.create_flow_from_name(FLOW_NAME)
        dep_id = await client.create_deployment(
            flow_id=flow_id,
            name=str(d.deployment),
            entrypoint="pipeline.distribute.shard_flow",
            work_pool_name=str(d.pool),
            parameter_openapi_schema=None,
            pull_steps=[],
            job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(int(d.heartbeat_s))}},
        )
        names = []
        for a in _automations(str(dep_id), int(d.zombie_after_s)):
            for old in await client.read_automations_by_name(a.name):
                await client.delete_automation(old.id)
            await a.acreate()
            names.append(a.name)
    return {"pool": str(d.pool), "queues": queues, "deployment": f"{FLOW_NAME}/{d.deployment}", "deployment_id": str(dep_id), "automations": names}


def setup(cfg: DictConfig, hardware: list[str]) -> dict:
    """Create (or update) the work pool, one queue per hardware id, the shard deployment and the two crash
    automations. Idempotent."""
    require_server()
    return asyncio.run(_setup(cfg, hardware))


def check_matrix(cfg: DictConfig, hardware: list[str], shards: int) -> None:
    """Refuse when ``params.yaml`` does not hold this hardware list and shard count: every machine reproduces the
    same committed matrix, so it is composed once, not per command."""
    have_hw, have_k = list(cfg.distribute.hardware), list(cfg.distribute.shards)
    if have_hw != list(hardware) or have_k != list(range(shards)):
        want = f"distribute.hardware=[{','.join(hardware)}] distribute.shards=[{','.join(map(str, range(shards)))}]"
        raise PrenetError(
            f"params.yaml has distribute.hardware={have_hw} and distribute.shards={have_k}; compose the matrix with "
            f"`python -m pipeline.compose {want}` (plus your other overrides) and commit params.yaml so every machine runs it"
        )


async def _submit(cfg: DictConfig, kind: str, hardware: list[str], repo_dir: str | None) -> list[tuple[str, Any]]:
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    d = cfg.distribute
    out = []
    for hw in hardware:
        for k in d.shards:
            try:
                fr = await run_deployment(
                    f"{FLOW_NAME}/{d.deployment}",
                    parameters={"kind": kind, "hardware": hw, "shard": int(k), "max_attempts": int(d.max_attempts), "repo_dir": repo_dir},
                    work_queue_name=hw,
                    timeout=0,
                    flow_run_name=f"{kind}@{hw}-{k}",
                )
            except ObjectNotFound:
                raise PrenetError(
                    f"no deployment {FLOW_NAME}/{d.deployment} (or no queue {hw!r}) on the server: run `prenet distribute setup` first"
                ) from None
            out.append((f"{kind}@{hw}-{k}", fr.id))
    return out


async def _wait(runs: list[tuple[str, Any]], timeout_s: float, poll_s: float = 2.0) -> dict[str, str]:
    from prefect import get_client

    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    async with get_client() as client:
        while True:
            states = {}
            for name, fid in runs:
                fr = await client.read_flow_run(fid)
                states[name] = fr.state.type.value if fr.state else "PENDING"
            if states != last:
                print("  " + ", ".join(f"{n}: {s.lower()}" for n, s in states.items()), flush=True)
                last = states
            if all(s in FINAL for s in states.values()):
                return states
            if time.monotonic() > deadline:
                raise PrenetError(
                    f"shards not finished after {timeout_s:.0f} s ({', '.join(f'{n} {s.lower()}' for n, s in states.items())}); "
                    "is a worker running on each queue? `prefect worker start --pool prenet --work-queue <hw> --limit 1`"
                )
            await asyncio.sleep(poll_s)


def merge_stage(kind: str) -> str:
    return f"distributed/dvc.yaml:merge_{kind}"


def coordinate_merge(kind: str, repo_dir: str | Path = REPO_ROOT) -> str:
    """On the coordinator: ``dvc repro --pull`` of the kind's merge, which restores every shard from the run-cache
    (or runs it here if no machine made it) and merges them."""
    has_remote(repo_dir)
    return dvc(["repro", "--pull", merge_stage(kind)], repo_dir)


def distribute(
    cfg: DictConfig,
    work: str,
    hardware: list[str],
    shards: int,
    *,
    wait: bool = True,
    timeout_s: float = 24 * 3600,
    merge: bool = True,
    repo_dir: str | None = None,
    coordinator_dir: str | Path = REPO_ROOT,
) -> dict:
    """Submit one flow run per shard of ``work`` (benchmark, corpus or finetune) to each hardware id's queue; with
    ``wait``, follow them to the end and merge on this machine (the corpus's boundary phase is submitted after its
    prior phase is merged) in ``coordinator_dir``. ``repo_dir``: the checkout the workers run in (default: each
    worker's own). Returns the flow-run ids, their states and the merges done."""
    phases = WORK.get(work) or ((work,) if work in KINDS else None)
    if phases is None:
        raise PrenetError(f"{work!r} cannot be distributed; choose one of {', '.join(WORK)} (or one phase: {', '.join(KINDS)})")
    check_matrix(cfg, hardware, shards)
    require_server()
    if len(phases) > 1 and not wait:
        raise PrenetError(f"{work} runs in phases ({' then '.join(phases)}); it needs --wait (or submit one phase: {phases[0]})")
    result: dict[str, Any] = {"states": {}, "merged": []}
    for kind in phases:
        runs = asyncio.run(_submit(cfg, kind, hardware, repo_dir))
        print(f"submitted {len(runs)} shard flow runs of {kind}: {', '.join(n for n, _ in runs)}", flush=True)
        result.setdefault("flow_runs", {}).update({n: str(i) for n, i in runs})
        if not wait:
            continue
        states = asyncio.run(_wait(runs, timeout_s))
        result["states"].update(states)
        bad = [n for n, s in states.items() if s != "COMPLETED"]
        if bad:
            raise PrenetError(
                f"{kind}: shard(s) {', '.join(bad)} did not complete; see `prefect flow-run logs <id>` "
                f"({', '.join(str(i) for n, i in runs if n in bad)})"
            )
        if merge:
            coordinate_merge(kind, coordinator_dir)
            result["merged"].append(merge_stage(kind))
            print(f"merged {kind} ({merge_stage(kind)})", flush=True)
    return result
