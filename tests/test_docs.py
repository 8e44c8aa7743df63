"""README.md, ARCHITECTURE.md and docs/ name only paths that exist (or that a stage writes) and `make` targets the
Makefile has: a renamed module or a removed target fails here, not in a reader's terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "ARCHITECTURE.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
TOP = ("prenet/", "pipeline/", "scripts/", "conf/", "tests/", "data/", "docs/", "distributed/", ".ci/")


def _stage_outputs() -> list[str]:
    """Every output path the stages of dvc.yaml and distributed/dvc.yaml declare, with the default ``paths``."""
    paths = yaml.safe_load((ROOT / "conf" / "paths" / "default.yaml").read_text())
    root = paths.pop("root")

    def sub(s: str) -> str:
        """Resolve ``${paths.x}`` until none is left (``models_ops_gpu`` names ``${paths.models_ops}``)."""
        for _ in range(8):
            s = re.sub(r"\$\{paths\.(\w+)\}", lambda m: str(paths.get(m.group(1), m.group(0))), s.replace("${paths.root}", root))
        return s

    dist = yaml.safe_load((ROOT / "conf" / "distribute" / "local.yaml").read_text())
    outs = (
        [f"{root}/{d}" for d in ("report", "plots", "metrics")]
        + [sub(paths["run_log"])]
        + ["distributed/dvc.lock", str(dist.get("scratch", "data/scratch"))]
    )
    for f in ("dvc.yaml", "distributed/dvc.yaml"):
        for st in (yaml.safe_load((ROOT / f).read_text()).get("stages") or {}).values():
            for key in ("outs", "metrics", "plots"):
                for o in st.get(key) or []:
                    outs.append(sub(next(iter(o)) if isinstance(o, dict) else str(o)))
    return outs


OUTPUTS = _stage_outputs()


def _paths(text: str) -> set[str]:
    """Repository paths in backticks or link targets (placeholders, globs and commands left out)."""
    cands = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s#]+)\)", text)
    out = set()
    for c in cands:
        c = c.rstrip(".,;:)").split(":")[0]  # file.py:function
        if not c.startswith(TOP) or any(ch in c for ch in "*<>{}$=|") or "…" in c or "..." in c:
            continue
        out.add(c.rstrip("/"))
    return out


def _written(path: str, output: str) -> bool:
    """``path`` is a stage output, lies inside one, or is a folder that holds one (``data/models``)."""
    o = output.rstrip("/")
    return path == o or path.startswith(o + "/") or o.startswith(path + "/")


@pytest.mark.parametrize("doc", DOCS)
def test_named_paths_exist_or_are_stage_outputs(doc):
    text = (ROOT / doc).read_text()
    missing = [p for p in sorted(_paths(text)) if not (ROOT / p).exists() and not any(_written(p, o) for o in OUTPUTS)]
    assert not missing, f"{doc} names paths that neither exist nor are written by a stage: {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_named_make_targets_exist(doc):
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"(?:^|`|\$ )make ([a-z][a-z-]+)", (ROOT / doc).read_text(), re.M))
    assert named - targets == set(), f"{doc} names make targets the Makefile lacks: {sorted(named - targets)}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
