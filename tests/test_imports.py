"""Every `from prenet... import name` / `from pipeline... import name` in the code, lazy ones inside functions
included, names something its module defines: a function moved between modules cannot leave a caller that fails
only when its branch runs."""

from __future__ import annotations

import ast
import importlib
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for d in ("prenet", "pipeline", "scripts") for p in (ROOT / d).rglob("*.py"))


@lru_cache(maxsize=1)
def _imports() -> tuple[tuple[str, int, str, str], ...]:
    out = []
    for f in FILES:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in ("prenet", "pipeline"):
                out += [(f.relative_to(ROOT).as_posix(), node.lineno, node.module, a.name) for a in node.names]
    return tuple(out)


@pytest.mark.parametrize("module", sorted({m for _, _, m, _ in _imports()}))
def test_every_imported_name_exists(module):
    mod = importlib.import_module(module)
    missing = []
    for f, line, m, name in _imports():
        if m != module or name == "*" or hasattr(mod, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")  # a submodule
        except ImportError:
            missing.append(f"{f}:{line} imports {name!r} from {module}")
    assert not missing, missing


#: stages that read tables and fit or score trees: importing torch (2-3 s on 2 cores) would be their whole start-up
TORCH_FREE_STAGES = ("validate", "split", "evaluate_convergence", "forecast_cost", "train_outcome", "evaluate_outcome", "report")


def test_stages_that_need_no_torch_do_not_import_it():
    import subprocess
    import sys

    code = "import importlib, json, sys\n" + "".join(f"importlib.import_module('pipeline.{s}')\n" for s in TORCH_FREE_STAGES)
    code += "print(json.dumps('torch' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "false", "a torch-free stage imports torch: python -X importtime -c 'import pipeline.<stage>'"
