"""What stages record (pipeline/record.py), the artifact catalog (pipeline/artifacts.py), the one paths root
(conf/paths/default.yaml) and the planner's typed interval records (prenet/planner/intervals.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.artifacts import SCHEMAS, artifact
from pipeline.config import compose
from pipeline.record import HEADLINE, headline, last_wall_times, read_record, record_metrics, split_run_log
from prenet.errors import PrenetError
from prenet.planner.intervals import RatioSet, StepsErrors, StepTimeErrors, load_intervals, read_errors, write_errors

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to report, evaluate_parallel and evaluate_outcome_ooc (conftest.tiny_pipeline: only these stages
    and their upstream): the headline test reads every stage's metrics, so it must not rely on another module's build."""
    return tiny_pipeline("report", "evaluate_parallel", "evaluate_outcome_ooc")


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_wall_times_leave_the_record_at_any_depth():
    kept, times = split_run_log({"wall_s": 3.5, "n": 2, "tasks": {"a": {"wall_s": 1.0, "acc": 0.9}}, "cost": {"seconds": 0.2}})
    assert kept == {"n": 2, "tasks": {"a": {"acc": 0.9}}, "cost": {"seconds": 0.2}}  # a measured cost is a result, kept
    assert times == {"wall_s": 3.5, "tasks.a.wall_s": 1.0}


def test_headline_is_the_named_scalars_only():
    rec = {"holdout": {"relative_eps=0.1": {"default": {"median_ape_pct": 4.1, "n": 3}}}, "holdout_configs": 24, "configs": 96}
    assert headline("convergence", rec) == {"eps_ape_pct": 4.1, "n": 24}


def test_record_metrics_writes_headline_record_and_run_log(tiny_cfg):
    record_metrics(tiny_cfg, "finetune", {"runs": 4, "diverged": 0, "per_task": {"a": [1, 2]}, "wall_s": 2.0, "threads": 1})
    assert json.loads((Path(tiny_cfg.paths.metrics) / "finetune.json").read_text()) == {"n": 4, "diverged": 0}
    assert read_record(tiny_cfg.paths.plots, "finetune") == {"runs": 4, "diverged": 0, "per_task": {"a": [1, 2]}, "threads": 1}
    entry = last_wall_times(tiny_cfg)["finetune"]
    assert entry["wall_s"] == 2.0 and entry["threads"] == int(tiny_cfg.threads)


def test_every_stage_records_its_headline_and_no_metrics_file_holds_a_table(tiny_run):
    root, cfg, _ = tiny_run
    for name, keys in HEADLINE.items():
        if name == "forecast_cost":
            continue  # off in the tiny run: its record is {"enabled": false}
        metrics = json.loads((Path(cfg.paths.metrics) / f"{name}.json").read_text())
        leaves = _leaves(metrics)
        record = read_record(cfg.paths.plots, name)
        for short, key in keys.items():  # every headline key the stage's record has is in its metrics (tiny turns some off)
            node = record
            for k in key:
                node = node.get(k) if isinstance(node, dict) else None
            assert (node is None) == (short not in leaves), (name, key)
        assert leaves, name
        assert all(isinstance(v, (int, float, bool, str)) for v in leaves.values()), name
        assert split_run_log(record)[1] == {}, name  # wall-clock times are in the run log only
    assert {"benchmark", "train", "evaluate_ops"} <= set(last_wall_times(cfg))


def test_dvc_metrics_show_is_readable():
    """The committed metrics: a few scalars per stage, one shared vocabulary (issue 15 measured one 197,000-character
    line, issue 27 839-character lines)."""
    p = subprocess.run([sys.executable, "-m", "dvc", "metrics", "show"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    assert max(len(line) for line in p.stdout.splitlines()) <= 400
    assert sum(len(_leaves(json.loads(f.read_text()))) for f in (ROOT / "data" / "metrics").glob("*.json")) <= 50


def test_one_root_moves_every_artifact(tmp_path):
    cfg = compose([f"paths.root={tmp_path}"])
    shipped = {
        "root",
        "outcome_vendored",
        "outcome_ooc",
        "outcome_ooc_beyond",
    }  # the root itself; the vendored corpus and the out-of-corpus runs are shipped inputs
    for key, value in cfg.paths.items():
        if key not in shipped:
            assert Path(value).is_relative_to(tmp_path), key
    assert cfg.paths.outcome_vendored == "data/outcome/vendored"


def test_catalog_names_real_artifacts_and_stages_use_it():
    cfg = compose([])
    for name in SCHEMAS:
        assert artifact(cfg, name).name, name  # every entry resolves to a paths key (or plots/<file>)
    with pytest.raises(KeyError, match="catalog"):
        artifact(cfg, "nonexistent")
    # no stage names a table's path and schema itself: they go through read_artifact / write_artifact
    for path in (ROOT / "pipeline").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("read_table", "write_table"):
                src = ast.unparse(node)
                assert "cfg.paths" not in src, f"{path.name}: {src} — use pipeline.artifacts.read_artifact/write_artifact"


def test_interval_records_round_trip_and_refuse_the_wrong_kind(tmp_path):
    step = StepTimeErrors(0.8, RatioSet.measure([0.9, 1.0, 1.1, 1.3], 0.8), None, memory_ratio_max=1.2)
    steps = StepsErrors(0.8, {"relative_eps=0.1": {"forecast": RatioSet.measure([1.0, 1.2, 0.8], 0.8)}})
    write_errors(step, tmp_path / "step_time.json")
    write_errors(steps, tmp_path / "steps.json")
    assert read_errors(tmp_path / "step_time.json", StepTimeErrors) == step
    assert read_errors(tmp_path / "steps.json", StepsErrors) == steps
    with pytest.raises(PrenetError, match="not StepsErrors"):
        read_errors(tmp_path / "step_time.json", StepsErrors)
    iv = load_intervals(tmp_path, steps_target="loss<=0.5*L0")  # no errors for that target: the closest measured one
    assert iv.step_local == [0.9, 1.0, 1.1, 1.3] and iv.steps == [1.0, 1.2, 0.8] and iv.memory_ratio_max == 1.2
    with pytest.raises(PrenetError, match="does not exist"):
        load_intervals(tmp_path / "missing")


def test_a_forecast_that_drifted_far_gets_its_drift_bands_wider_interval(tmp_path):
    from prenet.planner.intervals import drift_band

    assert [drift_band(d) for d in (0.05, 0.5, 5.0, None, float("nan"))] == ["<0.1", "0.1-1", ">=1", None, None]
    held = RatioSet.measure([0.95, 1.0, 1.05] * 4, 0.8)
    far = RatioSet.measure([0.5, 0.7, 1.0, 1.3, 1.6] * 2, 0.8)  # forecasts that drifted past 1: wider errors
    narrow = RatioSet.measure([0.99, 1.0, 1.01] * 4, 0.8)
    steps = StepsErrors(0.8, {"accuracy>=0.9": {"default": held}}, {">=1": far, "<0.1": narrow})
    write_errors(StepTimeErrors(0.8, RatioSet.measure([1.0, 1.1], 0.8), None), tmp_path / "step_time.json")
    write_errors(steps, tmp_path / "steps.json")
    assert read_errors(tmp_path / "steps.json", StepsErrors) == steps
    assert load_intervals(tmp_path, steps_target="accuracy>=0.9", drift=3.0).steps == list(far.ratios)
    assert load_intervals(tmp_path, steps_target="accuracy>=0.9", drift=0.01).steps == list(held.ratios)  # never narrowed
    assert load_intervals(tmp_path, steps_target="accuracy>=0.9", drift=0.5).steps == list(held.ratios)  # no such band
    assert load_intervals(tmp_path, steps_target="accuracy>=0.9").steps == list(held.ratios)


def test_the_pipeline_writes_the_intervals_the_planner_reads(tiny_run):
    root, cfg, _ = tiny_run
    iv = load_intervals(cfg.paths.intervals, steps_target="relative_eps=0.1")
    ops = read_errors(Path(cfg.paths.intervals) / "step_time_ops.json", StepTimeErrors)
    assert iv.step_local == list(ops.local_whole_model.ratios) and len(iv.step_local) > 0 and iv.steps


def test_the_run_log_says_where_and_from_what_a_wall_time_was_measured(tmp_path):
    from omegaconf import OmegaConf

    from pipeline.record import append_run_log
    from prenet.hardware.local import cpu_id

    cfg = OmegaConf.create({"paths": {"run_log": str(tmp_path / "run_log.jsonl")}, "threads": 1, "seed": 7})
    append_run_log(cfg, "train", {"wall_s": 1.5})
    line = json.loads((tmp_path / "run_log.jsonl").read_text())
    assert line["stage"] == "train" and line["wall_s"] == 1.5 and line["threads"] == 1 and line["seed"] == 7
    assert line["host"] == cpu_id() and (line["commit"] is None or line["commit"].rstrip("+").isalnum())
