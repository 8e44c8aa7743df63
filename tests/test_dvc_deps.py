"""Dependencies that cannot drift (issue 15 item 4, issue 27 item 1): each DVC stage's code deps are exactly the module
files its command imports, followed transitively through the project's own modules (``scripts/stage_deps.py --write``
writes them), and a stage of one predictor never depends on another predictor's package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline.stages import STAGES

_spec = importlib.util.spec_from_file_location("stage_deps", Path(__file__).resolve().parents[1] / "scripts" / "stage_deps.py")
stage_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_deps)

#: The library's packages of each predictor (everything else in prenet/ is shared: data, planner, rendering, names, ...).
PREDICTOR_PACKAGES = {
    "step_time": (
        "prenet/steptime/",
        "prenet/recipe/",
        "prenet/memory/",
        "prenet/user_models.py",
        "prenet/ops/",
        "prenet/measurement/",
        "prenet/layers/",
        "prenet/graph/",
        "prenet/hardware/",
        "prenet/zoo.py",
        "prenet/parallel/",
    ),
    "convergence": ("prenet/convergence/",),
    "early_success": ("prenet/outcome/", "prenet/telemetry/"),
}
#: The stages of dvc.yaml each predictor owns; ``report`` belongs to none (it reads records only).
_CONVERGENCE = ["pretrain", "finetune", "forecast", "evaluate_convergence", "forecast_cost"]
_EARLY_SUCCESS = ["corpus", "train_outcome", "evaluate_outcome", "evaluate_outcome_ooc"]
STAGE_PREDICTOR = {
    **dict.fromkeys(_CONVERGENCE, "convergence"),
    **dict.fromkeys(_EARLY_SUCCESS, "early_success"),
    "report": None,
    # every other stage is a step-time stage (multi-GPU steps included)
    **{s: "step_time" for s in STAGES if s not in {*_CONVERGENCE, *_EARLY_SUCCESS, "report"}},
}
_MAIN = [(n, st) for where, n, st in stage_deps._stages() if where == "dvc.yaml"]


@pytest.mark.parametrize("where,name,stage", stage_deps._stages(), ids=lambda x: x if isinstance(x, str) else "")
def test_stage_code_deps_are_exactly_the_modules_it_imports(where, name, stage):
    missing, extra = stage_deps.dep_drift(stage)
    assert not missing and not extra, (
        f"{where}:{name}: deps miss {missing} and list {extra} it does not import; run `python scripts/stage_deps.py --write`"
    )


def test_every_stage_of_dvc_yaml_has_a_predictor():
    assert {n for n, _ in _MAIN} == set(STAGE_PREDICTOR)


@pytest.mark.parametrize("name,stage", _MAIN, ids=[n for n, _ in _MAIN])
def test_a_stage_depends_on_no_other_predictors_package(name, stage):
    own = STAGE_PREDICTOR[name]
    foreign = [p for pred, prefixes in PREDICTOR_PACKAGES.items() if pred != own for p in prefixes]
    crossing = [d for d in stage_deps.needed_deps(stage) if d.startswith(tuple(foreign))]
    assert not crossing, f"{name} ({own or 'no predictor'}) imports another predictor's modules: {crossing}"


def test_the_import_closure_follows_lazy_and_relative_imports():
    files = {f.relative_to(stage_deps.ROOT).as_posix() for f in stage_deps.closure("pipeline.corpus")}
    assert {"pipeline/corpus.py", "prenet/outcome/generator.py", "prenet/errors.py", "prenet/data/io.py"} <= files


def test_the_schemas_import_no_predictor():
    files = {f.relative_to(stage_deps.ROOT).as_posix() for f in stage_deps.closure("prenet.data.schemas")}
    assert files == {"prenet/__init__.py", "prenet/data/__init__.py", "prenet/data/schemas.py", "prenet/names.py"}


def test_a_folder_dep_counts_as_extra_and_write_replaces_it():
    stage = {"cmd": "python -m pipeline.run validate", "deps": ["prenet/data", "data/external"]}
    missing, extra = stage_deps.dep_drift(stage)
    assert "prenet/data" in extra and "prenet/data/schemas.py" in missing
    text = "stages:\n  validate:\n    cmd: x\n    deps:\n      - prenet/data\n      - data/external  # vendored\n    params:\n      - seed\n"
    out = stage_deps.rewrite(text, "validate", stage)
    assert "- prenet/data\n" not in out and "      - prenet/data/schemas.py\n" in out and "      - data/external  # vendored\n" in out
    assert out.endswith("    params:\n      - seed\n")


_DIST = [(n, st) for where, n, st in stage_deps._stages() if where == "distributed/dvc.yaml"]
#: The predictor each distributable kind of work belongs to (pipeline/shard_kinds/).
KIND_PREDICTOR = {"benchmark": "step_time", "corpus_prior": "early_success", "corpus_boundary": "early_success", "finetune": "convergence"}


@pytest.mark.parametrize("name,stage", _DIST, ids=[n for n, _ in _DIST])
def test_a_distributed_stage_depends_on_its_own_predictor_only(name, stage):
    """A shard or merge stage imports its kind's module alone (pipeline.shards.kind), not every kind's."""
    kind = next(k for k in sorted(KIND_PREDICTOR, key=len, reverse=True) if name in (f"{k}_shard", f"merge_{k}"))
    own = KIND_PREDICTOR[kind]
    foreign = [p for pred, prefixes in PREDICTOR_PACKAGES.items() if pred != own for p in prefixes]
    crossing = [d for d in stage_deps.needed_deps(stage) if d.startswith(tuple(foreign))]
    assert not crossing, f"{name} ({own}) imports another predictor's modules: {crossing}"


def test_a_stage_declares_the_params_its_module_reads():
    """forecast_cost read convergence.evaluate.targets and train_outcome threads without declaring them: a change re-ran
    nothing. The check reads ``cfg.a.b`` chains in each stage's own module (paths, hydra and progress exempt)."""
    stages = {name: st for _, name, st in stage_deps._stages()}
    assert "convergence.evaluate.targets" in stage_deps.params_read(stages["forecast_cost"])
    assert {name: stage_deps.params_missing(st) for name, st in stages.items() if stage_deps.params_missing(st)} == {}
    undeclared = {**stages["forecast_cost"], "params": ["seed", "threads", "convergence.cost_check"]}
    assert stage_deps.params_missing(undeclared) == ["convergence.evaluate.targets"]
