"""Early-success predictor: the telemetry recorder, the corpus sampler, models, API and CLI on small real runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

from pipeline.cli import main
from prenet import datasets
from prenet.outcome import predict
from prenet.outcome.corpus import RunSpec, domain_data, plan_domain, sample_between, train_run
from prenet.outcome.evaluation import auc, paired_difference, r2
from prenet.telemetry import Recorder


def test_gradient_snr_follows_its_definition():
    w = nn.Parameter(torch.zeros(2))
    model = nn.Module()
    model.w = w
    rec = Recorder(model)
    for g in ([1.0, 0.0], [3.0, 2.0]):        # element 0: mean 2, var 2 → 2; element 1: mean 1, var 2 → 0.5
        w.grad = torch.tensor(g)
        rec.after_backward()
    row = rec.end_epoch(train_loss=1.0, train_accuracy=0.5)
    assert math.isclose(row["log10_grad_snr"], math.log10((4 + 1) / (2 + 2)), rel_tol=1e-6)   # Σ mean² / Σ var
    assert math.isclose(row["log10_grad_snr_median"], math.log10(0.5), rel_tol=1e-6)  # lower median of {2, 0.5}
    assert math.isclose(row["grad_norm"], (1 + math.sqrt(13)) / 2, rel_tol=1e-6)


def test_weight_growth_and_dead_relu_snapshot():
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    model = nn.Sequential(lin, nn.ReLU(), nn.Linear(3, 2), nn.Tanh())
    rec = Recorder(model, probe_inputs=torch.randn(16, 4))
    rec.end_epoch(train_loss=1.0, train_accuracy=0.1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
        lin.bias.fill_(-100.0)                   # every ReLU unit dead
    row = rec.end_epoch(train_loss=0.5, train_accuracy=0.2)
    assert row["dead_relu_frac"] == 1.0 and row["saturated_frac"] is not None
    assert rec.rows[0]["dead_relu_frac"] is None      # the snapshot is taken at epoch 2 only
    assert row["layer_norm_ratio_max"] == pytest.approx(2.0)
    t = rec.table()
    assert t.height == 2 and t["epoch"].to_list() == [1, 2]


def test_recorder_in_a_real_loop_gives_a_validated_table():
    d = datasets.load("digits", "train").select(None, limit=256, seed=0)
    spec = RunSpec("mlp_digits", 0.05, 32, 16, 1, "tanh", 1.0, 0.0, "sgd", 0, 3)
    res = train_run(spec, d, datasets.load("digits", "test"))
    assert len(res["rows"]) == 3 and 0 <= res["final_test_accuracy"] <= 1 and not res["diverged"]
    assert res["rows"][1]["saturated_frac"] is not None


def test_a_diverging_run_is_recorded_as_such():
    d = datasets.load("digits", "train").select(None, limit=128, seed=0)
    spec = RunSpec("mlp_digits", 1e6, 16, 16, 2, "relu", 5.0, 0.0, "sgd", 0, 4)
    res = train_run(spec, d, datasets.load("digits", "test"))
    assert res["diverged"] and res["final_test_accuracy"] == pytest.approx(0.1)
    assert res["rows"][-1]["train_loss"] is None


def test_boundary_interpolation_lands_between_its_parents():
    a = RunSpec("cnn_digits", 1.0, 32, 16, 2, "relu", 4.0, 0.0, "sgd", 0, 15)
    b = RunSpec("cnn_digits", 0.01, 64, 32, 1, "tanh", 0.5, 1e-3, "adam", 1, 15)
    for i in range(20):
        c = sample_between(a, b, np.random.default_rng(i), seed=i)
        span = math.log(1.0) - math.log(0.01)
        assert math.log(0.01) - 0.1 * span - 1e-9 <= math.log(c.lr) <= math.log(1.0) + 0.1 * span + 1e-9
        assert c.width in (16, 32) and c.optimizer in ("sgd", "adam")


def test_plan_is_deterministic_and_enriches_after_the_prior():
    from pipeline.config import compose
    from omegaconf import OmegaConf

    space = OmegaConf.to_container(compose([]).outcome.corpus.space)
    p1 = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0)
    assert len(p1) == 5 and [s.run_id for s, _ in p1] == [s.run_id for s, _ in plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0)]
    results = {s.run_id: (0.9 if i % 2 else 0.05, False) for i, (s, _) in enumerate(p1)}
    full = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0, prior_results=results)
    assert len(full) == 10 and [ph for _, ph in full[5:]] == ["boundary"] * 5


@pytest.mark.skipif(not datasets.fashion_mnist_available(), reason="dataset-fashion-mnist not installed (make install)")
def test_fashion_domain_data_is_a_fixed_downsampled_subset():
    tr, te = domain_data("fashion", fashion_train=50, fashion_test=20)
    assert tr.x.shape == (50, 1, 14, 14) and len(te) == 20


def test_scores():
    y = np.array([0, 0, 1, 1])
    assert auc(y, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0 and math.isnan(auc(np.zeros(3), np.ones(3)))
    assert r2(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 1.0
    yy = np.linspace(0, 1, 50)
    d = paired_difference(r2, yy, yy + 0.01, yy + 0.3 * np.sin(7 * yy), 200, 0)
    assert d["difference"] > 0 and d["p_value"] < 0.05


# --- stages, API and CLI on the tiny run ---------------------------------------------------------------------

def test_outcome_stages_and_api(tiny_run):
    root, cfg, results = tiny_run
    m = json.loads((Path(cfg.paths.metrics) / "outcome.json").read_text())
    assert "pooled" in m["results"] and "epoch_1" in m["results"]["pooled"] and "pooled" in m["ablation"]
    runs = pl.read_parquet(cfg.paths.outcome_runs)
    tel = pl.read_parquet(cfg.paths.outcome_telemetry)
    rid = runs["run_id"][0]
    table = tel.filter(pl.col("run_id") == rid).drop("run_id").filter(pl.col("epoch") <= 2)
    out = predict(table, domain=runs["domain"][0], models_dir=cfg.paths.outcome_models)
    assert 0 <= out.final_test_accuracy <= 1 and 0 <= out.failure_probability <= 1 and out.epoch == 2 and out.epochs_seen == 2
    assert out.relative_class in (0, 1, 2)
    with pytest.warns(UserWarning, match="pooled model"):
        assert predict(table, domain="vit_imagenet", models_dir=cfg.paths.outcome_models).scope == "pooled"


def test_outcome_cli(tiny_run, tmp_path, capsys):
    _, cfg, _ = tiny_run
    tel = pl.read_parquet(cfg.paths.outcome_telemetry)
    f = tmp_path / "run.csv"
    tel.filter(pl.col("run_id") == tel["run_id"][0]).drop("run_id").write_csv(f)
    assert main(["predict", "outcome", "--telemetry", str(f), "--models", cfg.paths.outcome_models]) == 0
    assert "not an automatic stop" in capsys.readouterr().out
    assert main(["predict", "outcome", "--telemetry", str(tmp_path / "missing.csv"), "--models", cfg.paths.outcome_models]) == 2
    assert capsys.readouterr().err.startswith("error: telemetry file")
    bad = tmp_path / "bad.csv"
    bad.write_text("epoch,train_accuracy\n1,0.5\n")
    assert main(["predict", "outcome", "--telemetry", str(bad), "--models", cfg.paths.outcome_models]) == 2
    assert "column 'train_loss': required column is missing" in capsys.readouterr().err
    text = tmp_path / "text.csv"
    text.write_text("epoch,train_loss,train_accuracy\n1,2.3,0.1\n2,abc,0.2\n")
    assert main(["predict", "outcome", "--telemetry", str(text), "--models", cfg.paths.outcome_models]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "column 'train_loss', row 2: 'abc' is not a number" in err


def _good_table() -> pl.DataFrame:
    from prenet.telemetry.recorder import telemetry_schema

    rows = [{c: (e if c == "epoch" else 10 if c == "minibatches" else 0.5) for c in telemetry_schema()} for e in (1, 2, 3)]
    return pl.DataFrame(rows, schema=telemetry_schema())


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.with_columns(pl.Series("grad_norm", [1.0, float("nan"), 1.0])), "column 'grad_norm', row 2: nan is not finite"),
    (lambda t: t.with_columns(pl.Series("train_loss", [1.0, 1.0, float("inf")])), "column 'train_loss', row 3: inf is not finite"),
    (lambda t: t.with_columns(pl.Series("train_accuracy", [0.2, 1.7, 0.5])), "column 'train_accuracy', row 2: 1.7 breaks the rule train_accuracy <= 1"),
    (lambda t: t.with_columns(pl.Series("epoch", [1, 2, 2])), "column 'epoch', row 3: epoch 2 repeats row 2"),
    (lambda t: t.with_columns(pl.Series("epoch", [1, 2, 4])), "column 'epoch': epoch 3 is missing"),
    (lambda t: t.with_columns(pl.lit(1.0).alias("val_loss")), "column 'val_loss': unknown column"),
    (lambda t: t.with_columns(pl.Series("train_loss", ["1.0", "x", "2"])), "column 'train_loss', row 2: 'x' is not a number"),
    (lambda t: t.head(0), "the table has no rows"),
])
def test_bad_telemetry_is_one_line_naming_column_row_and_rule(edit, message):
    from prenet.outcome.telemetry_input import TelemetryError, check_telemetry

    assert check_telemetry(_good_table()).height == 3
    with pytest.raises(TelemetryError) as e:
        check_telemetry(edit(_good_table()), source="run.csv")
    assert message in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("run.csv: ")


def test_absent_optional_telemetry_columns_warn_and_are_empty():
    from prenet.outcome.telemetry_input import check_telemetry

    with pytest.warns(UserWarning, match="has no grad_norm"):
        out = check_telemetry(_good_table().drop("grad_norm"))
    assert out["grad_norm"].null_count() == 3
