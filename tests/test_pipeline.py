"""One slice of the pipeline end to end on the tiny config, and the Hydra CLI over the same stage functions."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from pipeline.config import compose
from pipeline.evaluate import evaluate
from pipeline.split import split_rule
from pipeline.train import train
from prenet.data.split_rule import assign
from tests.conftest import tiny_overrides

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to report (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("report")


def test_every_stage_writes_its_outputs(tiny_run):
    root, cfg, results = tiny_run
    for key in ("raw_timings", "hardware_record", "features", "validated", "dev", "holdout"):
        assert Path(cfg.paths[key]).exists(), key
    assert (Path(cfg.paths.models) / "manifest.json").exists()
    ev = json.loads((Path(cfg.paths.plots) / "evaluate.json").read_text())
    assert {"linear", "conv2d"} <= set(ev["by_op"])
    assert set(ev["recipes"]) == {"prenet", "justus_recipe", "prenet_recipe"}
    assert ev["whole_model"]["prenet"]["overall"]["n"] == 4  # mlp and lstm_lm at two batch sizes
    assert ev["overall"]["n"] > 0 and ev["overall"]["mape_pct"] > 0
    assert "local_median_spread_pct" in ev["noise_floor"]
    html = (Path(cfg.paths.report) / "index.html").read_text()
    assert html.count("data:image/png;base64,") >= 3 and "<script src" not in html and html.count("<script") == 1  # only the inline load check
    assert (Path(cfg.paths.report) / "holdout_scatter.png").stat().st_size > 1000


def declared_outputs(stage: str, cfg) -> list[Path]:
    """Every out, metric and plot that dvc.yaml declares for ``stage``, its ``${paths.*}`` resolved against ``cfg``."""
    import re

    import yaml

    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]
    names = [o if isinstance(o, str) else next(iter(o)) for kind in ("outs", "metrics", "plots") for o in spec.get(kind) or []]
    return [Path(re.sub(r"\$\{paths\.(\w+)\}", lambda m: str(cfg.paths[m.group(1)]), n)) for n in names]


def test_every_declared_output_exists_even_when_a_check_is_switched_off(tiny_run):
    """DVC fails a stage whose declared out is missing: the tiny config turns checks off, and each still leaves its
    output (empty) and says so in its metrics."""
    _, cfg, results = tiny_run
    missing = {stage: [str(p) for p in declared_outputs(stage, cfg) if not p.exists()] for stage in results}
    assert not {s: m for s, m in missing.items() if m}
    ev_ops = json.loads((Path(cfg.paths.plots) / "evaluate_ops.json").read_text())
    assert ev_ops["neusight_whole_model"] == {"ran": False, "enable_with": "ops.evaluate.neusight_whole_model=true"}
    from prenet.rendering.results import results_tables

    rows = [r for table in results_tables(Path(cfg.paths.plots)) for r in table]
    assert not [r for r in rows if "NeuSight's measured transformer steps" in r[0]]  # no row of Nones for a check that did not run


def test_timing_rows_record_hardware_and_threads(tiny_run):
    _, cfg, _ = tiny_run
    raw = pl.read_parquet(cfg.paths.raw_timings)
    assert raw["hardware_id"].null_count() == 0 and set(raw["threads"]) == {cfg.threads}
    assert set(raw["direction"]) == {"forward", "forward_backward", "train_step"}
    # the zoo steps: measured in interleaved rounds, each row the median of its rounds
    zoo_steps = pl.read_parquet(cfg.paths.model_timings)
    m = cfg.models
    assert zoo_steps.height == len(m.names) * len(m.batch_sizes) * len(m.optimizers)
    assert set(zoo_steps["repeats"]) == {int(m.rounds) * int(m.repeats)} and int(m.rounds) > 1
    assert zoo_steps["probe_ms"].null_count() == 0 and (zoo_steps["measured_ms"] > 0).all()


def test_train_never_sees_holdout_and_evaluate_sees_only_holdout(tiny_run):
    _, cfg, _ = tiny_run
    rule = split_rule(cfg)
    dev = pl.read_parquet(cfg.paths.dev)
    hold = pl.read_parquet(cfg.paths.holdout)
    assert all(assign(k, rule) != "holdout" for k in dev["shape_id"].unique())
    assert all(assign(k, rule) == "holdout" for k in hold["shape_id"].unique())
    pred = pl.read_csv(Path(cfg.paths.plots) / "holdout_predictions.csv")
    assert set(pred["sample_id"]) == set(hold["sample_id"])


def test_train_stage_guard_fires_on_a_leaked_dev_table(tiny_run, tmp_path):
    from prenet.errors import HoldoutLeakError

    _, cfg, _ = tiny_run
    c = OmegaConf.create(OmegaConf.to_container(cfg))
    leaked = pl.concat([pl.read_parquet(cfg.paths.dev), pl.read_parquet(cfg.paths.holdout).head(1).with_columns(pl.lit("train").alias("split"))])
    c.paths.dev = str(tmp_path / "dev.parquet")
    leaked.write_parquet(c.paths.dev)
    with pytest.raises(HoldoutLeakError):
        train(c)


@pytest.mark.slow  # 20 s to 6 min on 2 cores: `make test-slow` runs it (CI too)
@pytest.mark.parametrize("predictor", ["linear", "mlp", "random_forest"])
def test_each_predictor_gives_comparable_metrics(tiny_run, tmp_path, predictor):
    root, cfg, _ = tiny_run
    c = compose(
        tiny_overrides(
            root,
            f"predictor={predictor}",
            f"paths.models={tmp_path / 'models'}",
            f"paths.metrics={tmp_path}",
            f"paths.models_baseline={tmp_path / 'mb'}",
            f"paths.models_selected={tmp_path / 'ms'}",
            f"paths.plots={tmp_path / 'plots'}",
            f"paths.intervals={tmp_path / 'intervals'}",
            f"paths.run_log={tmp_path / 'run_log.jsonl'}",
            "predictor.epochs=20" if predictor == "mlp" else "seed=0",
        )
    )
    train(c)
    ev = evaluate(c)
    base = json.loads((Path(cfg.paths.plots) / "evaluate.json").read_text())
    assert ev["predictor"] == predictor
    assert set(ev["by_op"]) == set(base["by_op"]) and set(ev["overall"]) == set(base["overall"])


@pytest.mark.slow  # 20 s to 6 min on 2 cores: `make test-slow` runs it (CI too)
def test_hydra_cli_runs_the_same_stage_function(tiny_run, tmp_path):
    root, cfg, _ = tiny_run
    args = [a for a in tiny_overrides(root) if not a.startswith(("paths.models", "paths.metrics", "paths.plots"))]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.train",
            "predictor=random_forest",
            "predictor.n_estimators=30",
            *args,
            f"paths.models={tmp_path / 'models'}",
            f"paths.models_baseline={tmp_path / 'mb'}",
            f"paths.models_selected={tmp_path / 'ms'}",
            f"paths.metrics={tmp_path}",
            f"paths.plots={tmp_path / 'plots'}",
            f"paths.run_log={tmp_path / 'run_log.jsonl'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "models" / "manifest.json").read_text())
    assert {e["predictor"] for e in manifest["ops"].values()} == {"random_forest"}
    assert {e["params"]["n_estimators"] for e in manifest["ops"].values()} == {30}
    assert json.loads((tmp_path / "plots" / "train.json").read_text())["predictor"] == "random_forest"


def test_featurize_refuses_an_empty_local_benchmark(tiny_cfg):
    from pipeline.featurize import featurize
    from prenet.errors import PrenetError

    raw = Path(tiny_cfg.paths.raw_timings)
    raw.parent.mkdir(parents=True, exist_ok=True)
    from prenet.data.schemas import RawTimings

    pl.DataFrame(schema={n: c.dtype.type for n, c in RawTimings.to_schema().columns.items()}).write_parquet(raw)  # no rows
    with pytest.raises(PrenetError, match="has no rows: the local benchmark measured nothing"):
        featurize(tiny_cfg)
