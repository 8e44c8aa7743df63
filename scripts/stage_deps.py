"""Usage: python scripts/stage_deps.py [--write]

Each DVC stage's Python imports, followed transitively through the project's own modules (imports inside functions
included), against the stage's ``deps`` in ``dvc.yaml`` and ``distributed/dvc.yaml``. Prints what is missing;
``--write`` inserts it (a ``prenet/<package>`` folder for a library module, the file itself for the rest).
``tests/test_dvc_deps.py`` fails while anything is missing.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prenet", "pipeline")


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(path: Path) -> set[str]:
    """Project modules ``path`` imports (absolute or relative, at any depth of the file)."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        pkg = pkg.rsplit(".", 1)[0] + ".__init__"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = pkg.split(".")[: -node.level]
                base = ".".join([*parent, base]) if base else ".".join(parent)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] in PACKAGES}
    return out


def closure(module: str) -> set[Path]:
    """Files of ``module`` and everything of the project it imports, transitively (parent packages included)."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
            f = _module_file(".".join(parts[:i]))
            if f is not None and f not in seen:
                seen.add(f)
                todo += sorted(_imports(f))
    return seen


def _stage_modules(cmd: str) -> list[str]:
    mods = []
    m = re.search(r"python -m (pipeline\.\w+)(?:\s+(\w+))?", cmd)
    if m:
        mods.append(m.group(1))
        if m.group(1) == "pipeline.run" and m.group(2):
            mods.append(f"pipeline.{m.group(2)}")
    return mods


def _stages() -> list[tuple[str, str, dict]]:
    out = []
    for f in (ROOT / "dvc.yaml", ROOT / "distributed" / "dvc.yaml"):
        for name, st in yaml.safe_load(f.read_text())["stages"].items():
            out.append((f.relative_to(ROOT).as_posix(), name, st))
    return out


def missing_deps(stage: dict) -> list[Path]:
    """Project files the stage's command imports that none of its deps covers."""
    deps = [str(d if isinstance(d, str) else next(iter(d))) for d in stage.get("deps", [])]
    covered = [ROOT / d.rstrip("/") for d in deps if not d.startswith("$")]
    needed = set().union(*(closure(m) for m in _stage_modules(stage["cmd"])))
    return sorted(f for f in needed if not any(f == c or c in f.parents for c in covered))


def cover(files: list[Path]) -> list[str]:
    """Dependency entries covering ``files``: a library package's folder when every module in it is needed, else
    the files (so a stage that needs ``prenet/planner/intervals.py`` does not re-run on a change to the rendering)."""
    out = set()
    needed = set(files)
    for f in files:
        rel = f.relative_to(ROOT)
        whole = rel.parts[0] == "prenet" and len(rel.parts) > 2 and set(f.parent.glob("*.py")) <= needed
        out.add(rel.parent.as_posix() if whole else rel.as_posix())
    return sorted(out)


def main(argv: list[str]) -> int:
    write = "--write" in argv
    bad = 0
    for where, name, stage in _stages():
        missing = missing_deps(stage)
        if not missing:
            continue
        bad += 1
        entries = cover(missing)
        print(f"{where}:{name}: add {', '.join(entries)}")
        if write:
            path = ROOT / where
            lines = path.read_text().splitlines(keepends=True)
            i = next(k for k, ln in enumerate(lines) if ln.rstrip() == f"  {name}:")
            j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "deps:")
            indent = " " * (len(lines[j + 1]) - len(lines[j + 1].lstrip()))
            lines[j + 1 : j + 1] = [f"{indent}- {e}\n" for e in entries]
            path.write_text("".join(lines))
    return 1 if bad and not write else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
