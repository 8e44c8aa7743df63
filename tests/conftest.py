"""Shared fixtures: the real configuration, shrunk (experiment=tiny) and pointed at a temporary folder."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# no stored traces: a test sees the trace its code makes (tests/test_job_trace.py turns the store on, in a tmp dir)
os.environ["PRENET_TRACE_CACHE"] = "off"
# no artifacts of the checkout's own runs (data/models…, which CI's clean checkout lacks): the library's and the CLI's
# default locations point into an empty folder, so a test reads only what it built (tiny_pipeline) or names
os.environ["PRENET_ARTIFACTS"] = tempfile.mkdtemp(prefix="prenet-no-artifacts-")
atexit.register(shutil.rmtree, os.environ["PRENET_ARTIFACTS"], ignore_errors=True)

# answers for this CPU at its op benchmark's recorded speed, not scaled by a probe of the shared host's speed now (a
# test holds the probe's path: tests/test_host_speed.py)
os.environ["PRENET_HOST_SPEED"] = "recorded"

import torch  # noqa: E402

torch.set_num_threads(1)

from pipeline.config import compose  # noqa: E402


def tiny_overrides(root: Path, *extra: str) -> list[str]:
    """The tiny experiment with every artifact under ``root`` (the one ``paths.root`` override)."""
    return ["experiment=tiny", "progress=false", f"paths.root={root}", *extra]


@pytest.fixture
def tiny_cfg(tmp_path):
    """The real config with experiment=tiny, every output under tmp_path."""
    return compose(tiny_overrides(tmp_path))


def upstream_stages() -> dict[str, set[str]]:
    """Each stage of ``dvc.yaml`` → every stage whose outputs it reads, transitively (a dep equal to, or inside, another
    stage's out, as written there: ``${paths.*}`` templates compare as text)."""
    import yaml

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "dvc.yaml").read_text())["stages"]

    def paths(items) -> list[str]:
        return [next(iter(i)) if isinstance(i, dict) else str(i) for i in items or []]

    outs = {n: paths(st.get("outs")) + paths(st.get("metrics")) + paths(st.get("plots")) for n, st in spec.items()}
    direct = {
        n: {m for m in spec if m != n and any(d == o or d.startswith(o.rstrip("/") + "/") for d in paths(st.get("deps")) for o in outs[m])}
        for n, st in spec.items()
    }
    closure: dict[str, set[str]] = {}

    def up(n: str) -> set[str]:
        if n not in closure:
            closure[n] = set().union(*({m} | up(m) for m in direct[n])) if direct[n] else set()
        return closure[n]

    return {n: up(n) for n in spec}


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    """``build(*stages)`` → (root, cfg, results): the named stages of the tiny config and every stage upstream of them
    (dvc.yaml's graph), each run at most once per session in pipeline order, under one shared root. A test file asks for
    what it reads, so running it alone builds only that."""
    import importlib

    from pipeline.stages import STAGES

    root = tmp_path_factory.mktemp("tiny_run")
    cfg = compose(tiny_overrides(root))
    results: dict = {}
    upstream = upstream_stages()

    def build(*stages: str):
        unknown = [s for s in stages if s not in upstream]
        assert not unknown, f"not stages of dvc.yaml: {unknown}"
        need = set(stages).union(*(upstream[s] for s in stages))
        for stage in STAGES:
            if stage in need and stage not in results:
                results[stage] = getattr(importlib.import_module(f"pipeline.{stage}"), stage)(cfg)
        return root, cfg, results

    return build


#: What a scratch checkout of the project needs (tests add params.yaml or distributed/ as they need).
PROJECT_FILES = [
    "conf",
    "pipeline",
    "prenet",
    "dvc.yaml",
    "pyproject.toml",
    "data/external",
    "data/hardware",
    "data/reference",
    "data/outcome/vendored",
    "data/outcome/out_of_corpus",
    "data/outcome/beyond_corpus",
    ".dvc/config",
    ".dvc/.gitignore",
]


def copy_project(dst: Path, rels: list[str]) -> Path:
    """A scratch checkout: the project's ``rels`` (files or folders) copied under ``dst``, then ``git init``."""
    import shutil
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    for rel in rels:
        src, d = repo / rel, dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, d, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, d)
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    return dst
