"""Usage: python scripts/stage_deps.py [--write]
       python scripts/stage_deps.py --importers prenet/ops/families.py ...   (the stages a change to a module re-runs)

Each DVC stage's Python imports, followed transitively through the project's own modules (imports inside functions
included), against the stage's ``deps`` in ``dvc.yaml`` and ``distributed/dvc.yaml``. The code deps of a stage are
exactly the module files it imports: no package folders (a change to one module re-runs only the stages that import
it, and no generated ``__pycache__`` file is ever hashed). Prints what is missing or extra; ``--write`` replaces the
stage's code deps with the exact list. ``tests/test_dvc_deps.py`` fails while anything differs.
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
        if m.group(1) in ("pipeline.shard", "pipeline.merge_shards") and m.group(2):  # kind(name) imports its module alone
            from pipeline.shards import KIND_MODULE

            mods.append(f"pipeline.shard_kinds.{KIND_MODULE[m.group(2)]}")
    return mods


def _stages() -> list[tuple[str, str, dict]]:
    out = []
    for f in (ROOT / "dvc.yaml", ROOT / "distributed" / "dvc.yaml"):
        for name, st in yaml.safe_load(f.read_text())["stages"].items():
            out.append((f.relative_to(ROOT).as_posix(), name, st))
    return out


#: Vendored data a library module reads at run time (the import closure cannot see it): a stage that imports the module
#: depends on the data too.
DATA_READ: dict[str, tuple[str, ...]] = {
    "prenet/hardware/catalog.py": ("data/hardware/gpu_specs.csv", "data/hardware/gpu_clocks.csv", "data/external/justus2018/justus_gpu_specs.csv"),
    "prenet/data/external.py": ("data/external/justus2018", "data/external/neusight2025"),
    "prenet/data/external_ops.py": ("data/external/neusight2025",),
    "prenet/data/external_kernels.py": ("data/external/deepbench", "data/external/xla_perf_tables"),
    "prenet/steptime/reference_evaluation.py": ("data/external/dle2024", "data/external/pytorch_gpu_benchmark", "data/external/neusight2025"),
    "prenet/parallel/interconnect.py": ("data/hardware/interconnect.csv",),
    "prenet/parallel/measured.py": ("data/external/collectives",),
    "prenet/parallel/scaling.py": ("data/external/dle2024",),
}


def _code_entry(dep: str) -> bool:
    """A dependency entry that names the project's own Python code (a module file or a package folder)."""
    return dep.split("/", 1)[0] in PACKAGES


def _declared(stage: dict) -> list[str]:
    return [str(d if isinstance(d, str) else next(iter(d))) for d in stage.get("deps", [])]


def needed_deps(stage: dict) -> list[str]:
    """The module files the stage's command imports, transitively, as sorted paths relative to the root."""
    needed = set().union(*(closure(m) for m in _stage_modules(stage["cmd"])))
    return sorted(f.relative_to(ROOT).as_posix() for f in needed)


def needed_data(stage: dict) -> list[str]:
    """The vendored data (:data:`DATA_READ`) the stage's modules read."""
    data = {d for f in needed_deps(stage) for d in DATA_READ.get(f, ())}
    return sorted(d for d in data if not any(d.startswith(c + "/") for c in data))  # a folder covers its files


def dep_drift(stage: dict) -> tuple[list[str], list[str]]:
    """(missing, extra): module files the stage imports, and data they read, that its deps do not list (a data folder
    covers what is in it); and code entries of its deps that it does not import (a package folder counts as extra:
    deps name module files, so a change to one module re-runs only the stages that import it)."""
    declared_all = _declared(stage)
    declared = {d for d in declared_all if _code_entry(d)}
    needed = set(needed_deps(stage))
    data = [d for d in needed_data(stage) if not any(d == c or d.startswith(c.rstrip("/") + "/") for c in declared_all)]
    return sorted(needed - declared) + data, sorted(declared - needed)


def rewrite(text: str, name: str, stage: dict) -> str:
    """``text`` (a dvc.yaml) with stage ``name``'s code deps replaced by exactly :func:`needed_deps` (other deps kept,
    after them, in their order and with their comments)."""
    lines = text.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.rstrip() == f"  {name}:")
    j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "deps:")
    indent = " " * (len(lines[j + 1]) - len(lines[j + 1].lstrip()))
    k = j + 1
    kept = []
    while k < len(lines) and lines[k].startswith(indent + "- "):
        entry = lines[k][len(indent) + 2 :].split("#", 1)[0].strip()
        if not _code_entry(entry):
            kept.append(lines[k])
        k += 1
    covered = [ln[len(indent) + 2 :].split("#", 1)[0].strip() for ln in kept]
    data = [d for d in needed_data(stage) if not any(d == c or d.startswith(c.rstrip("/") + "/") for c in covered)]
    lines[j + 1 : k] = [f"{indent}- {e}\n" for e in needed_deps(stage)] + kept + [f"{indent}- {d}\n" for d in data]
    return "".join(lines)


def importers(module_file: str) -> list[str]:
    """The stages (``file:stage``) whose command imports ``module_file`` (a path relative to the root)."""
    return [f"{where}:{name}" for where, name, st in _stages() if module_file in needed_deps(st)]


#: Configuration nodes a stage may read without declaring them as params: file locations (``paths``: the stage's
#: deps and outs say which files), Hydra's own, and whether progress bars show (no output depends on it).
PARAMS_EXEMPT = ("paths", "hydra", "progress")


def params_read(stage: dict) -> set[str]:
    """The configuration keys the stage's own module reads (``pipeline/<stage>.py``, or its shard kind's: the library
    takes plain arguments, and the shared helpers read only ``paths`` and the run log's settings) as ``cfg.a.b…``
    attribute chains, the trailing method calls (``.get``, ``.items``…) dropped."""
    keys = set()
    for mod in _stage_modules(stage["cmd"]):
        f = _module_file(mod)
        if f is None or mod in ("pipeline.run", "pipeline.shard", "pipeline.merge_shards"):
            continue
        for chain in re.findall(r"\bcfg((?:\.[A-Za-z_]\w*)+)", f.read_text()):
            parts = [p for p in chain.split(".")[1:]]
            while parts and parts[-1] in ("get", "items", "keys", "values", "copy"):
                parts.pop()
            if parts and parts[0] not in PARAMS_EXEMPT:
                keys.add(".".join(parts))
    return keys


def params_missing(stage: dict) -> list[str]:
    """The keys of :func:`params_read` that no declared param covers (the param itself, a node above it, or one below
    it: reading a node whose parts are declared)."""
    declared = [str(p if isinstance(p, str) else next(iter(p))) for p in stage.get("params", [])]
    return sorted(k for k in params_read(stage) if not any(k == d or k.startswith(d + ".") or d.startswith(k + ".") for d in declared))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--importers"]:
        for f in argv[1:]:
            print(f"{f}: {', '.join(importers(f)) or '-'}")
        return 0
    write = "--write" in argv
    bad = 0
    for where, name, stage in _stages():
        if params := params_missing(stage):  # not rewritten: which params a stage depends on is a decision
            bad += 1
            print(f"{where}:{name}: reads params it does not declare: {', '.join(params)}")
        missing, extra = dep_drift(stage)
        if not (missing or extra):
            continue
        bad += 1
        print(f"{where}:{name}: add {', '.join(missing) or '-'}; remove {', '.join(extra) or '-'}")
        if write:
            path = ROOT / where
            path.write_text(rewrite(path.read_text(), name, stage))
    return 1 if bad and not write else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
