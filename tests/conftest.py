"""Shared fixtures: the real configuration, shrunk (experiment=tiny) and pointed at a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """Every stage of the pipeline run once, in order, on the tiny config (shared by the tests that read it)."""
    import importlib

    from pipeline import STAGES

    root = tmp_path_factory.mktemp("tiny_run")
    cfg = compose(tiny_overrides(root))
    results = {}
    for stage in STAGES:
        results[stage] = getattr(importlib.import_module(f"pipeline.{stage}"), stage)(cfg)
    return root, cfg, results


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
