"""Dependencies that cannot drift (issue 15 item 4): each DVC stage's Python imports, followed transitively through
the project's own modules, must be covered by the stage's ``deps`` (``scripts/stage_deps.py --write`` adds them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("stage_deps", Path(__file__).resolve().parents[1] / "scripts" / "stage_deps.py")
stage_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_deps)


@pytest.mark.parametrize("where,name,stage", stage_deps._stages(), ids=lambda x: x if isinstance(x, str) else "")
def test_stage_deps_cover_every_module_it_imports(where, name, stage):
    missing = [str(f.relative_to(stage_deps.ROOT)) for f in stage_deps.missing_deps(stage)]
    assert not missing, f"{where}:{name} imports {missing} but its deps do not list them; run `python scripts/stage_deps.py --write`"


def test_the_import_closure_follows_lazy_and_relative_imports():
    files = {f.relative_to(stage_deps.ROOT).as_posix() for f in stage_deps.closure("pipeline.corpus")}
    assert {"pipeline/corpus.py", "prenet/outcome/generator.py", "prenet/errors.py", "prenet/data/io.py"} <= files
