"""Early-success predictor: the telemetry recorder, the corpus sampler, models, API and CLI on small real runs."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

from pipeline.cli import main
from prenet import datasets
from prenet.errors import PrenetError
from prenet.outcome import predict
from prenet.outcome.evaluation import auc, paired_difference, r2
from prenet.outcome.generator import RunSpec, domain_data, plan_domain, sample_between, train_run
from prenet.telemetry import Recorder


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to evaluate_outcome (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("evaluate_outcome")


def test_gradient_snr_follows_its_definition():
    w = nn.Parameter(torch.zeros(2))
    model = nn.Module()
    model.w = w
    rec = Recorder(model)
    for g in ([1.0, 0.0], [3.0, 2.0]):  # element 0: mean 2, var 2 → 2; element 1: mean 1, var 2 → 0.5
        w.grad = torch.tensor(g)
        rec.after_backward()
    row = rec.end_epoch(train_loss=1.0, train_accuracy=0.5)
    assert math.isclose(row["log10_grad_snr"], math.log10((4 + 1) / (2 + 2)), rel_tol=1e-6)  # Σ mean² / Σ var
    assert math.isclose(row["log10_grad_snr_median"], math.log10(0.5), rel_tol=1e-6)  # lower median of {2, 0.5}
    assert math.isclose(row["grad_norm"], (1 + math.sqrt(13)) / 2, rel_tol=1e-6)


def test_within_epoch_quarters_follow_their_definition():
    w = nn.Parameter(torch.zeros(1))
    model = nn.Module()
    model.w = w
    rec = Recorder(model)
    for loss, g in zip([2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]):
        w.grad = torch.tensor([g])
        rec.after_backward(torch.tensor(loss))
    row = rec.end_epoch(train_loss=1.375, train_accuracy=0.5)
    assert row["loss_end"] == pytest.approx(0.5)  # the last quarter's 2 minibatches
    assert row["loss_trend"] == pytest.approx(math.log(0.5 / 2.0))  # falls within the epoch, where the mean hides it
    assert row["grad_norm_trend"] == pytest.approx(math.log(4.0))
    for _ in range(8):  # no loss passed (an older loop): the loss quarters are unknown, the gradient's still measured
        w.grad = torch.tensor([1.0])
        rec.after_backward()
    row = rec.end_epoch(train_loss=1.0, train_accuracy=0.5)
    assert row["loss_end"] is None and row["loss_trend"] is None and row["grad_norm_trend"] == pytest.approx(0.0)
    assert rec.table().height == 2


def test_weight_growth_and_dead_relu_snapshot():
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    model = nn.Sequential(lin, nn.ReLU(), nn.Linear(3, 2), nn.Tanh())
    rec = Recorder(model, probe_inputs=torch.randn(16, 4))
    rec.end_epoch(train_loss=1.0, train_accuracy=0.1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
        lin.bias.fill_(-100.0)  # every ReLU unit dead
    row = rec.end_epoch(train_loss=0.5, train_accuracy=0.2)
    assert row["dead_relu_frac"] == 1.0 and row["saturated_frac"] is not None
    assert rec.rows[0]["dead_relu_frac"] is not None  # a snapshot at every epoch end
    assert row["layer_norm_ratio_max"] == pytest.approx(2.0)
    assert row["update_ratio"] > 0.5 and row["val_loss"] is None  # weights doubled (biases reset): ‖Δw‖/‖w‖ large
    t = rec.table()
    assert t.height == 2 and t["epoch"].to_list() == [1, 2]


def test_recorder_in_a_real_loop_gives_a_validated_table():
    d = datasets.load("digits", "train").select(None, limit=256, seed=0)
    v = datasets.load("digits", "train").select(None, limit=64, seed=1)
    spec = RunSpec("mlp_digits", 0.05, 32, 16, 1, "tanh", 1.0, 0.0, "momentum", 0, 3, "warmup_cosine", 0.2, 0.5)
    res = train_run(spec, d, v, datasets.load("digits", "test"))
    assert len(res["rows"]) == 3 and 0 <= res["final_test_accuracy"] <= 1 and not res["diverged"]
    assert res["rows"][1]["saturated_frac"] is not None and 0 <= res["rows"][2]["val_accuracy"] <= 1
    assert res["rows"][0]["minibatches"] == 4  # half of 256 samples in batches of 32
    # the recorder read the optimizer: the epoch's mean lr under warm-up then cosine over 3 × 4 steps, SGD's momentum
    from prenet.outcome.generator import lr_factor, optimizer_telemetry

    want = [0.05 * np.mean([lr_factor("warmup_cosine", t, 12) for t in range(4 * e, 4 * e + 4)]) for e in range(3)]
    assert [r["lr"] for r in res["rows"]] == pytest.approx(want) and {(r["momentum"], r["adaptive"]) for r in res["rows"]} == {(spec.momentum, 0.0)}
    # a corpus recorded before the recorder read the optimizer gets the same columns from the run's settings
    runs = pl.DataFrame([{"run_id": "r", "lr": 0.05, "schedule": "warmup_cosine", "optimizer": "momentum", "momentum": spec.momentum, "epochs": 3}])
    tel = pl.DataFrame([{"run_id": "r", "epoch": r["epoch"], "minibatches": r["minibatches"], "train_loss": r["train_loss"]} for r in res["rows"]])
    derived = optimizer_telemetry(runs, tel)
    assert derived["lr"].to_list() == pytest.approx(want) and derived["momentum"].to_list() == [spec.momentum] * 3
    adam = optimizer_telemetry(runs.with_columns(pl.lit("adam").alias("optimizer")), tel)
    assert adam["momentum"].to_list() == [0.9] * 3 and adam["adaptive"].to_list() == [1.0] * 3
    # from the epoch a run diverged in on, its rows are copies: the optimizer's reading there is unknown
    diverged = optimizer_telemetry(
        runs, tel.with_columns(pl.when(pl.col("epoch") >= 2).then(None).otherwise(pl.col("train_loss")).alias("train_loss"))
    )
    assert diverged["lr"].to_list()[0] == pytest.approx(want[0]) and diverged["lr"].to_list()[1:] == [None, None]


def test_a_diverging_run_is_recorded_as_such():
    d = datasets.load("digits", "train").select(None, limit=128, seed=0)
    spec = RunSpec("mlp_digits", 1e30, 16, 16, 2, "relu", 5.0, 0.0, "sgd", 0, 4)
    res = train_run(spec, d, d, datasets.load("digits", "test"))
    assert res["diverged"] and res["final_test_accuracy"] == pytest.approx(0.1)
    assert res["rows"][-1]["train_loss"] is None


def test_schedules_and_optimizers_are_what_they_say():
    from prenet.outcome.generator import lr_factor, run_optimizer, run_train_set
    from prenet.outcome.space import OPTIMIZERS, SCHEDULES

    assert [lr_factor("step", t, 100) for t in (0, 49, 50, 75)] == [1.0, 1.0, 0.1, 0.01]
    assert lr_factor("cosine", 0, 100) == 1.0 and lr_factor("cosine", 50, 100) == pytest.approx(0.5)
    assert lr_factor("warmup_cosine", 0, 100) == pytest.approx(0.1) and lr_factor("warmup_cosine", 9, 100) == 1.0
    assert lr_factor("warmup_cosine", 99, 100) < 0.01 and all(lr_factor(s, 3, 10) > 0 for s in SCHEDULES)
    kinds = {
        o: type(run_optimizer(RunSpec("mlp_digits", 0.1, 16, 8, 1, "relu", 1.0, 0.0, o, 0, 1), [nn.Parameter(torch.zeros(1))])).__name__
        for o in OPTIMIZERS
    }
    assert kinds == {"sgd": "SGD", "momentum": "SGD", "adam": "Adam", "adamw": "AdamW"}
    d = datasets.load("digits", "train")
    noisy = run_train_set(RunSpec("mlp_digits", 0.1, 16, 8, 1, "relu", 1.0, 0.0, "sgd", 3, 1, "constant", 0.5, 0.25), d)
    assert len(noisy) == round(0.25 * len(d))
    clean = run_train_set(RunSpec("mlp_digits", 0.1, 16, 8, 1, "relu", 1.0, 0.0, "sgd", 3, 1, "constant", 0.0, 0.25), d)
    assert torch.equal(noisy.x, clean.x) and 0.3 < float((noisy.y != clean.y).float().mean()) < 0.6  # ½ relabelled, 9/10 of those change


def test_boundary_interpolation_lands_between_its_parents():
    a = RunSpec("cnn_digits", 1.0, 32, 16, 2, "relu", 4.0, 0.0, "sgd", 0, 15)
    b = RunSpec("cnn_digits", 0.01, 64, 32, 1, "tanh", 0.5, 1e-3, "adam", 1, 15)
    for i in range(20):
        c = sample_between(a, b, np.random.default_rng(i), seed=i)
        span = math.log(4.0) - math.log(0.5)
        assert math.log(0.5) - 0.1 * span - 1e-9 <= math.log(c.init_scale) <= math.log(4.0) + 0.1 * span + 1e-9
        assert c.width in (16, 32) and c.optimizer in ("sgd", "adam")
        assert c.lr in (1.0, 0.01)  # different optimizers: the lr comes with its optimizer


def test_plan_is_deterministic_and_enriches_after_the_prior():
    from omegaconf import OmegaConf

    from pipeline.config import compose

    space = OmegaConf.to_container(compose([]).outcome.corpus.space)
    p1 = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0)
    assert len(p1) == 5 and [s.run_id for s, _ in p1] == [
        s.run_id for s, _ in plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0)
    ]
    results = {s.run_id: (0.9 if i % 2 else 0.05, False, 0.1 if i < 4 else 0.6) for i, (s, _) in enumerate(p1)}
    full = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0, prior_results=results)
    assert len(full) == 10 and [ph for _, ph in full[5:]] == ["boundary"] * 5
    more = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0, prior_results=results, takeoff_runs=3)
    assert more[:10] == full and [ph for _, ph in more[10:]] == ["takeoff"] * 3  # adding take-off runs keeps the others
    # the take-off runs interpolate between the slow starters (epoch-2 accuracy 0.1): runs 0 and 2 failed, 1 and 3 bloomed
    slow = [p1[i][0] for i in range(4)]
    for s, _ in more[10:]:
        lo, hi = min(x.init_scale for x in slow), max(x.init_scale for x in slow)
        assert lo / (hi / lo) ** 0.1 <= s.init_scale <= hi * (hi / lo) ** 0.1 and s.width in {x.width for x in slow}
    # without a slow starter that failed, the first half has no pair: the prior answers there, and says so; the
    # second half interpolates between the two that took off
    quick = {k: (v[0], v[1], 0.6 if v[0] < 0.5 else v[2]) for k, v in results.items()}
    alone = plan_domain("mlp_digits", space, n_runs=10, prior_fraction=0.5, epochs=15, seed=0, prior_results=quick, takeoff_runs=2)
    assert [ph for _, ph in alone[10:]] == ["prior", "takeoff"] and alone[11][0].width in (p1[1][0].width, p1[3][0].width)


def test_a_recipe_adds_runs_from_its_own_settings_and_leaves_the_others_planned_as_before():
    from omegaconf import OmegaConf

    from pipeline.config import compose

    c = compose([]).outcome.corpus
    space, enrich = OmegaConf.to_container(c.space), OmegaConf.to_container(c.enrich)
    hb = enrich["heavy_ball"]
    kw = dict(n_runs=10, prior_fraction=0.5, epochs=15, seed=0, takeoff_runs=2)
    p1 = plan_domain("mlp_digits", space, **kw)
    results = {s.run_id: (0.9 if i % 2 else 0.05, False, 0.1) for i, (s, _) in enumerate(p1)}
    before = plan_domain("mlp_digits", space, prior_results=results, **kw)
    recipe = {"heavy_ball": {**hb, "runs": 6}}
    after = plan_domain("mlp_digits", space, prior_results=results, enrich=recipe, **kw)
    assert after[:12] == before and [ph for _, ph in after[12:]] == ["heavy_ball"] * 6
    for s, _ in after[12:]:  # the recipe's settings replace the prior's; the rest is the prior's
        assert s.optimizer == "momentum" and s.momentum in hb["space"]["momentum_values"] and s.schedule in hb["space"]["schedules"]
        assert s.width in hb["space"]["widths"] and hb["space"]["lr_range"]["momentum"][0] <= s.lr <= hb["space"]["lr_range"]["momentum"][1]
        assert s.depth in space["depths"] and s.activation in space["activations"]
    assert len({s.run_id for s, _ in after}) == len(after)
    # recipe runs need no results (the first pass plans them too) and a domain the recipe does not name gets none
    assert plan_domain("mlp_digits", space, enrich=recipe, **kw)[-6:] == after[12:]
    assert all(ph != "heavy_ball" for _, ph in plan_domain("cnn_digits", space, prior_results=results, enrich=recipe, **kw))
    with pytest.raises(PrenetError, match="unknown recipe 'wide'"):  # a recipe's name is the phase its runs carry
        plan_domain("mlp_digits", space, enrich={"wide": hb}, **kw)


def test_features_of_gapped_runs_are_computed_a_column_at_a_time_as_one_run_alone():
    """design() works over all runs at once: a run missing an epoch, a null or non-positive loss, a run absent from
    the table, a repeated run and a run alone all give what its own row gives; the power law is least squares in
    log-log over the positive losses (as np.polyfit fits it)."""
    from prenet.outcome.features import PROJECT_EPOCH, design, feature_names, single_run

    loss = {"a": [2.0, 1.1, 0.7, 0.5], "b": [2.3, None, 1.9, -1.0], "c": [1.5, 0.0, 0.9, 0.8]}
    rows = [
        {"run_id": r, "epoch": e + 1, "train_loss": v, "train_accuracy": 0.1 * (e + 1), "minibatches": 4}
        for r, vs in loss.items()
        for e, v in enumerate(vs)
        if not (r == "b" and e == 1)  # b has no row for epoch 2
    ]
    tel = pl.DataFrame(rows)
    ids = ["c", "a", "missing", "a", "b"]
    X = design(tel, ids, 4, "telemetry")
    col = {n: i for i, n in enumerate(feature_names(4, "telemetry"))}
    for i, r in enumerate(ids):
        alone = single_run(tel.filter(pl.col("run_id") == r).drop("run_id"), 4)[0] if r != "missing" else None
        if alone is not None:
            np.testing.assert_array_equal(X[i], alone)
    assert np.isnan(X[2]).all()  # a run the table lacks: nothing known
    np.testing.assert_array_equal(X[1], X[3])
    k = np.array([1.0, 3.0, 4.0])  # c: the zero loss at epoch 2 is left out of the fit
    slope, icpt = np.polyfit(np.log(k), np.log([1.5, 0.9, 0.8]), 1)
    assert X[0, col["loss_exponent"]] == pytest.approx(-slope) and X[0, col["loss_projected"]] == pytest.approx(
        math.exp(icpt + slope * math.log(PROJECT_EPOCH))
    )
    # b: no epoch-2 row and a negative loss at epoch 4: fitted on epochs 1 and 3
    assert X[4, col["loss_exponent"]] == pytest.approx(-math.log(1.9 / 2.3) / math.log(3)) and np.isnan(X[4, col["train_loss_e2"]])
    assert X[4, col["d_train_loss"]] == pytest.approx(-2.9) and X[4, col["train_loss_e4"]] == -1.0 and np.isnan(X[4, col["loss_ratio_e2"]])


@pytest.mark.skipif(not datasets.fashion_mnist_available(), reason="dataset-fashion-mnist not installed (make install)")
def test_fashion_domain_data_is_a_fixed_downsampled_subset():
    tr, va, te = domain_data("fashion", fashion_train=100, fashion_test=20)
    assert tr.x.shape == (85, 1, 14, 14) and len(va) == 15 and len(te) == 20


def test_features_are_normalised_and_name_their_groups():
    from prenet.outcome.features import GROUPS, design, feature_names, mask_groups

    base = {"train_accuracy": 0.5, "minibatches": 10, "grad_norm": 2.0, "val_accuracy": 0.4, "val_loss": 1.5}
    rows = [
        {"run_id": r, "epoch": e, "train_loss": 2.0 * s / e, **{k: v * (s if k == "grad_norm" else 1) for k, v in base.items()}}
        for r, s in (("a", 1.0), ("b", 10.0))
        for e in (1, 2, 3)
    ]
    tel = pl.DataFrame(rows)
    X = design(tel, ["a", "b"], 3, "telemetry", domains=["mlp_digits", "transformer_text"], schedules=["cosine", None])
    names = feature_names(3, "telemetry")
    col = {n: i for i, n in enumerate(names)}
    assert X[0, col["log10_grad_norm_ratio_e3"]] == X[1, col["log10_grad_norm_ratio_e3"]] == 0.0  # scale-free
    assert X[0, col["loss_ratio_e3"]] == pytest.approx(1 / 3) and X[0, col["loss_exponent"]] == pytest.approx(1.0)
    assert X[0, col["loss_projected"]] == pytest.approx(2.0 / 15)  # a·15^(−1)
    assert X[0, col["gap_accuracy_e2"]] == pytest.approx(0.1) and X[0, col["arch_code"]] == 0.0 and math.isnan(X[1, col["arch_code"]])
    assert X[0, col["schedule_code"]] == 2.0 and math.isnan(X[1, col["schedule_code"]])
    masked = mask_groups(X, 3, "telemetry", ("generalization",), rows=np.array([True, False]))
    assert math.isnan(masked[0, col["val_accuracy_e1"]]) and masked[1, col["val_accuracy_e1"]] == 0.4 and X[0, col["val_accuracy_e1"]] == 0.4
    assert len(feature_names(3, "telemetry", drop=("curve",))) == len(names) - 4 and set(GROUPS) >= {"domain", "generalization"}
    assert feature_names(3, "loss_acc") == [n for n in names if n.startswith(("train_", "d_train", "loss_ratio"))]
    # the take-off trend: log loss 2/1 → 2/2 → 2/3 falls ever more slowly (positive curvature); accuracy is flat
    assert X[0, col["loss_curvature"]] == pytest.approx(math.log10(1 / 3) - 2 * math.log10(1 / 2)) and X[0, col["accuracy_curvature"]] == 0.0
    assert math.isnan(X[0, col["d_log10_grad_snr"]])  # no SNR recorded
    assert "weight_growth" in feature_names(2, "telemetry") and "loss_curvature" not in feature_names(2, "telemetry")
    assert not [n for n in feature_names(1, "telemetry") if n in ("weight_growth", "d_log10_grad_snr")]
    # the optimizer's settings as the recorder read them: SGD's heavy-ball step lr / (1 − m); none for Adam's scale
    opt = tel.with_columns(
        pl.when(pl.col("epoch") == 1).then(0.1).otherwise(0.05).alias("lr"),
        pl.lit(0.9).alias("momentum"),
        pl.when(pl.col("run_id") == "a").then(0.0).otherwise(1.0).alias("adaptive"),
    )
    Xo = design(opt, ["a", "b"], 3, "telemetry")
    assert Xo[0, col["log10_lr"]] == pytest.approx(math.log10(0.05)) and Xo[0, col["log10_lr_ratio"]] == pytest.approx(math.log10(0.5))
    assert Xo[0, col["log10_sgd_step"]] == pytest.approx(math.log10(0.5)) and math.isnan(Xo[1, col["log10_sgd_step"]])
    assert math.isnan(X[0, col["log10_lr"]])  # a recorder not given the optimizer: unknown


def test_scores():
    y = np.array([0, 0, 1, 1])
    assert auc(y, np.array([0.1, 0.2, 0.8, 0.9])) == 1.0 and math.isnan(auc(np.zeros(3), np.ones(3)))
    assert r2(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 1.0
    yy = np.linspace(0, 1, 50)
    d = paired_difference(r2, yy, yy + 0.01, yy + 0.3 * np.sin(7 * yy), 200, 0)
    assert d["difference"] > 0 and d["p_value"] < 0.05


def test_resampled_statistics_equal_one_call_per_resample():
    """The row-wise bootstrap forms give each resample what the scalar statistic gives it, ties and a resample
    lacking a class included (AUC NaN)."""
    from prenet.outcome.evaluation import ROWWISE, class_accuracy, mae, resampled

    rng = np.random.default_rng(0)
    y, p = rng.random(40), rng.random(40)
    labels, scores = (np.arange(40) % 20 == 3).astype(int), np.round(rng.random(40), 1)  # two positives, tied scores
    idx = rng.integers(0, 40, (300, 40))
    for fn, arrays in ((r2, [y, p]), (mae, [y, p]), (auc, [labels, scores]), (class_accuracy, [labels, labels[::-1]])):
        assert fn in ROWWISE
        rows = resampled(fn, arrays, idx)
        loop = np.array([fn(*[a[i] for a in arrays]) for i in idx])
        np.testing.assert_array_equal(rows, loop)
    assert np.isnan(resampled(auc, [labels, scores], idx)).any()
    unknown = np.where(np.arange(40) % 7 == 0, np.nan, labels)  # an outcome not known: left out by both forms
    np.testing.assert_array_equal(resampled(auc, [unknown, scores], idx), [auc(unknown[i], scores[i]) for i in idx])
    assert auc(unknown, scores) == auc(labels[~np.isnan(unknown)], scores[~np.isnan(unknown)])


def test_r2_by_phase_scores_each_phase_and_the_corpus_without_take_off():
    from prenet.outcome.crossval import r2_by_phase

    y = np.linspace(0.1, 0.9, 60)
    runs = pl.DataFrame({"final_test_accuracy": y, "phase": ["prior"] * 20 + ["boundary"] * 20 + ["takeoff"] * 20})
    pred = y.copy()
    pred[40:] = 0.5  # the take-off runs answered with a constant
    out = r2_by_phase(runs, pred)
    assert out["prior"] == out["boundary"] == out["without_takeoff"] == 1.0 and out["takeoff"] < 0
    assert set(r2_by_phase(runs[:45], pred[:45])) == {"prior", "boundary", "without_takeoff"}  # 5 take-off runs: too few


def test_take_off_model_is_saved_loaded_and_answers_slow_runs(tiny_run, tmp_path, monkeypatch):
    import prenet.outcome.models as models_module
    from prenet.outcome.models import SLOW_BELOW, accuracy_at, domain_thresholds, fit_take_off, labels, load, save, stacked_accuracy, train_all

    monkeypatch.setattr(models_module, "STACK_MIN_RUNS", 2)  # the tiny corpus's few slow runs learn the stack's weights
    _, cfg, _ = tiny_run
    runs, tel = pl.read_parquet(cfg.paths.outcome_runs), pl.read_parquet(cfg.paths.outcome_telemetry)
    slow = accuracy_at(runs, tel, 2) < SLOW_BELOW
    assert slow.sum() >= 4
    # half of the slow runs end as successes, half as failures: the model has both to learn from
    ends = np.where(np.cumsum(slow) % 2 == 0, 0.99, 0.0)
    runs = runs.with_columns(pl.Series("final_test_accuracy", np.where(slow, ends, runs["final_test_accuracy"].to_numpy())))
    params = {"n_estimators": 5, "max_depth": 2, "learning_rate": 0.3, "subsample": 1.0, "colsample_bytree": 1.0, "max_bin": 16}
    lab = labels(runs, domain_thresholds(runs, 0.5, 3))
    assert fit_take_off(lab, tel, 2, params=params, seed=0, min_runs=int(slow.sum()) + 1) is None  # too few slow runs
    kw = dict(epochs=[1, 2], params=params, classes=3, failure_fraction=0.5, interval=[0.1, 0.9], seed=0, folds=2)
    models, manifest = train_all(runs, tel, take_off_min_runs=2, **kw)
    base = manifest["take_off"]["base_rate"]["2"]
    took = manifest["take_off"]["took_off_final_accuracy"]["2"]
    assert len(took) == 21 and took[0] == pytest.approx(0.99) and took[-1] == pytest.approx(0.99)  # the slow runs that took off
    assert base == pytest.approx(1 - labels(runs, manifest["thresholds"]).filter(pl.Series(slow))["failure"].mean())
    loaded = load(save(models, manifest, tmp_path / "models"))
    assert loaded[0][("pooled", 2, "telemetry", "take_off")].constant is None
    rid = runs.filter(pl.Series(slow))["run_id"][0]
    table = tel.filter((pl.col("run_id") == rid) & (pl.col("epoch") <= 2)).drop("run_id")
    out = predict(table, loaded=loaded)
    assert 0 <= out.take_off_probability <= 1 and out.take_off_base_rate == base and out.may_take_off == (out.take_off_probability >= base)
    # the answer for a slow run is the stack of the accuracy model's and the take-off model's, with the manifest's weights
    weights = manifest["take_off"]["stack"]["2"]
    acc = loaded[0][("pooled", 2, "telemetry", "final_test_accuracy")]
    assert len(weights) == 3 and acc.stack == tuple(weights) and acc.take_off is loaded[0][("pooled", 2, "telemetry", "take_off")]
    alone = predict(table, loaded=({**loaded[0], ("pooled", 2, "telemetry", "final_test_accuracy"): replace(acc, stack=None)}, loaded[1]))
    assert out.final_test_accuracy == pytest.approx(float(stacked_accuracy([alone.final_test_accuracy], [out.take_off_probability], weights)[0]))
    # a refit with the manifest's weights (leave-one-group-out, the seed spread) answers as the trained models do
    from prenet.outcome.features import design
    from prenet.outcome.models import fit_targets

    refit = fit_targets(lab, tel, 2, "telemetry", params=params, seed=0, stack=weights, take_off_min_runs=2)["final_test_accuracy"]
    X = design(tel, runs["run_id"].to_list(), 2, "telemetry")
    assert refit.stack == acc.stack and (accuracy_at(runs, tel, 2) < SLOW_BELOW).any()
    np.testing.assert_allclose(refit.predict(X), acc.predict(X), atol=1e-6)
    # a degenerate base rate (every slow run failed) never answers with the take-off model: the interval rule does
    flat = {**loaded[1], "take_off": {**loaded[1]["take_off"], "base_rate": {"1": 0.0, "2": 0.0}}}
    assert predict(table, loaded=(loaded[0], flat)).take_off_probability is None
    # without the take-off model (models trained before it), the interval rule answers too
    assert predict(table, loaded=train_all(runs, tel, take_off_min_runs=10_000, **kw)).take_off_probability is None


def test_slow_runs_are_answered_stacked_with_the_take_off_probability(tmp_path):
    from prenet.outcome.features import feature_names
    from prenet.outcome.models import (
        ACCURACY_TARGET,
        SLOW_BELOW,
        Fitted,
        accuracy_columns,
        accuracy_now,
        fit_one,
        fit_stack,
        load,
        save,
        stacked_accuracy,
    )

    rng = np.random.default_rng(0)
    a, p = rng.random(80), rng.random(80)
    assert fit_stack(a, p, 0.1 + 0.5 * a + 0.3 * p) == pytest.approx((0.1, 0.5, 0.3), abs=1e-5)  # least squares
    assert fit_stack(a[:10], p[:10], a[:10]) is None  # too few slow runs: the accuracy model answers alone
    np.testing.assert_allclose(stacked_accuracy([0.2, 0.9], [1.0, 1.0], (0.0, 1.0, 0.5)), [0.7, 1.0])  # clipped to [0, 1]
    cols = accuracy_columns(2, "telemetry")
    X = rng.random((100, len(feature_names(2, "telemetry"))))
    params = {"n_estimators": 20, "max_depth": 2, "learning_rate": 0.3, "subsample": 1.0, "colsample_bytree": 1.0, "max_bin": 16}
    alone = fit_one("final_test_accuracy", X, np.clip(accuracy_now(X, cols) + 0.1, 0, 1), params, 0, base=cols)
    stacked = replace(alone, take_off=Fitted("take_off", constant=1.0), stack=(0.0, 1.0, 0.25))  # every slow run takes off
    slow = accuracy_now(X, cols) < SLOW_BELOW
    assert 0 < slow.sum() < len(X)
    np.testing.assert_allclose(stacked.predict(X)[~slow], alone.predict(X)[~slow])  # runs no longer slow: unchanged
    np.testing.assert_allclose(stacked.predict(X)[slow], np.clip(alone.predict(X)[slow] + 0.25, 0, 1))
    # saved and loaded, the manifest's weights and the epoch's take-off model stack the answer again
    keys = {t: ("pooled", 2, "telemetry", t) for t in ("final_test_accuracy", "take_off")}
    manifest = {"epochs": [2], "scopes": ["pooled"], "feature_sets": ["telemetry"], "targets": ["final_test_accuracy"]}
    take_off = {"base_rate": {"2": 0.4}, "stack": {"2": [0.0, 1.0, 0.25]}}
    folder = save(
        {keys["final_test_accuracy"]: alone, keys["take_off"]: stacked.take_off},
        {**manifest, "accuracy_target": ACCURACY_TARGET, "take_off": take_off},
        tmp_path / "m",
    )
    np.testing.assert_allclose(load(folder)[0][keys["final_test_accuracy"]].predict(X), stacked.predict(X))


def test_the_accuracy_model_learns_the_gain_over_the_accuracy_now(tmp_path):
    import json

    from prenet.outcome.features import feature_names
    from prenet.outcome.models import ACCURACY_TARGET, accuracy_columns, accuracy_now, fit_one, load, save

    val, train = cols = accuracy_columns(2, "telemetry")
    assert feature_names(2, "telemetry")[val] == "val_accuracy_e2" and feature_names(2, "telemetry")[train] == "train_accuracy_e2"
    assert accuracy_columns(2, "loss_acc")[0] is None  # no validation in that set: the train accuracy is the accuracy now
    X = np.random.default_rng(0).random((200, len(feature_names(2, "telemetry"))))
    X[:100, val] = np.nan  # no validation recorded: the train accuracy, as accuracy_at reads a table
    now = accuracy_now(X, cols)
    assert (now[:100] == X[:100, train]).all() and (now[100:] == X[100:, val]).all()
    params = {"n_estimators": 50, "max_depth": 2, "learning_rate": 0.3, "subsample": 1.0, "colsample_bytree": 1.0, "max_bin": 16}
    y = np.clip(now + 0.1, 0, 1)  # every run gains 0.1 (capped at 1): one constant for the trees, not a level per run
    m = fit_one("final_test_accuracy", X, y, params, 0, base=cols)
    np.testing.assert_allclose(m.predict(X), y, atol=0.02)
    assert np.abs(fit_one("final_test_accuracy", X, y, params, 0).predict(X) - y).max() > 0.02  # the level itself: not
    assert fit_one("failure", X, (y > 0.6).astype(int), params, 0, base=cols).base is None  # only the accuracy model
    # saved and loaded, it adds the accuracy now back; a manifest without the key holds models of the level
    manifest = {"epochs": [2], "scopes": ["pooled"], "feature_sets": ["telemetry"], "targets": ["final_test_accuracy"]}
    folder = save({("pooled", 2, "telemetry", "final_test_accuracy"): m}, {**manifest, "accuracy_target": ACCURACY_TARGET}, tmp_path / "m")
    np.testing.assert_allclose(load(folder)[0][("pooled", 2, "telemetry", "final_test_accuracy")].predict(X), m.predict(X))
    (folder / "manifest.json").write_text(json.dumps({**manifest, "constants": {}}))
    assert load(folder)[0][("pooled", 2, "telemetry", "final_test_accuracy")].base is None


def test_a_seed_bag_averages_its_fits_and_survives_saving(tiny_run, tmp_path):
    from prenet.outcome.features import design
    from prenet.outcome.models import ACCURACY_TARGET, domain_thresholds, fit_targets, labels, load, save

    _, cfg, _ = tiny_run
    runs, tel = pl.read_parquet(cfg.paths.outcome_runs), pl.read_parquet(cfg.paths.outcome_telemetry)
    lab = labels(runs, domain_thresholds(runs, 0.5, 3))
    params = {"n_estimators": 10, "max_depth": 2, "learning_rate": 0.3, "subsample": 0.7, "colsample_bytree": 0.7, "max_bin": 16, "bag": 3}
    bag = fit_targets(lab, tel, 2, "telemetry", params=params, seed=4)
    singles = [fit_targets(lab, tel, 2, "telemetry", params=params, seed=s, bag=1) for s in (4, 5, 6)]  # the bag's seeds
    X = design(tel, runs["run_id"].to_list(), 2, "telemetry", domains=runs["domain"].to_list(), schedules=runs["schedule"].to_list())
    acc = bag["final_test_accuracy"]
    assert len(acc.members) == 2 and len(bag["failure"].members) == 2
    np.testing.assert_allclose(bag["failure"].predict(X), np.mean([m["failure"].predict(X) for m in singles], axis=0), rtol=1e-6)
    one = [m["final_test_accuracy"].predict(X) for m in singles]
    assert not np.allclose(one[0], one[1])  # the seeds differ (sampling), so the bag is not one fit three times
    inside = (np.min(one, axis=0) - 1e-6 <= acc.predict(X)) & (acc.predict(X) <= np.max(one, axis=0) + 1e-6)
    assert inside.all()  # the mean of the gains, the accuracy now added back: between the members' answers
    manifest = {"epochs": [2], "scopes": ["pooled"], "feature_sets": ["telemetry"], "targets": ["final_test_accuracy", "failure"]}
    folder = save({("pooled", 2, "telemetry", t): m for t, m in bag.items()}, {**manifest, "accuracy_target": ACCURACY_TARGET}, tmp_path / "bag")
    back = load(folder)[0][("pooled", 2, "telemetry", "final_test_accuracy")]
    assert len(back.members) == 2
    np.testing.assert_allclose(back.predict(X), acc.predict(X), rtol=1e-6)
    assert fit_targets(lab, tel, 2, "telemetry", params={**params, "bag": 1}, seed=4)["failure"].members == ()
    # the bag for the accuracy model alone (outcome.predictor.bag_targets): the failure classifier is its first fit
    only = fit_targets(lab, tel, 2, "telemetry", params={**params, "bag_targets": ["final_test_accuracy"]}, seed=4)
    assert len(only["final_test_accuracy"].members) == 2 and only["failure"].members == ()
    np.testing.assert_allclose(only["final_test_accuracy"].predict(X), acc.predict(X), rtol=1e-6)
    np.testing.assert_allclose(only["failure"].predict(X), singles[0]["failure"].predict(X), rtol=1e-6)
    assert fit_targets(lab, tel, 2, "telemetry", params={**params, "bag_targets": []}, seed=4)["final_test_accuracy"].members == ()
    with pytest.raises(PrenetError, match="bag_targets"):
        fit_targets(lab, tel, 2, "telemetry", params={**params, "bag_targets": ["final_accuracy"]}, seed=4)
    import xgboost as xgb  # models saved as JSON (before 2026-12-06) still load, members too

    old = tmp_path / "json"
    old.mkdir()
    (old / "manifest.json").write_text((folder / "manifest.json").read_text())
    for f in folder.glob("*.ubj"):
        b = xgb.Booster()
        b.load_model(f)
        b.save_model(old / f.with_suffix(".json").name)
    np.testing.assert_allclose(load(old)[0][("pooled", 2, "telemetry", "final_test_accuracy")].predict(X), acc.predict(X), rtol=1e-6)


def test_the_failure_probability_mixes_the_classifier_with_the_accuracy_models_residuals():
    from prenet.outcome.models import FAILURE_CLASSIFIER_SHARE, failure_probability

    res = [-0.3, -0.1, 0.0, 0.1]  # out-of-fold actual − predicted
    clf, acc = np.array([0.2, 0.9]), np.array([0.45, 0.8])
    # run 1: 0.45 − 0.3 and 0.45 − 0.1 fall below 0.4 (2 of 4); run 2: none below 0.4, 0.8 − 0.3 and 0.8 − 0.1 below 0.75
    want = FAILURE_CLASSIFIER_SHARE * clf + (1 - FAILURE_CLASSIFIER_SHARE) * np.array([0.5, 0.0])
    np.testing.assert_allclose(failure_probability(clf, acc, res, 0.4), want)
    np.testing.assert_allclose(failure_probability(clf, acc, res, np.array([0.4, 0.75])), want + (1 - FAILURE_CLASSIFIER_SHARE) * np.array([0, 0.5]))
    assert (failure_probability(clf, acc, None, 0.4) == clf).all() and (failure_probability(clf, acc, [], 0.4) == clf).all()
    np.testing.assert_allclose(failure_probability(clf, acc, np.array(res), 0.4), want)  # an array of residuals too


def test_interval_bands_widen_an_undecided_run_and_keep_the_overall_width_where_runs_sit_at_chance():
    from prenet.outcome.models import interval_bounds, residual_bands

    rng = np.random.default_rng(0)
    pred = rng.uniform(0, 1, 600)
    # residuals as in the corpus: tight where a run is already called (near 0 or 1), wide in between
    res = rng.normal(0, 0.02 + 0.3 * pred * (1 - pred), 600)
    b = residual_bands(pred, res, [0.1, 0.9], 5)
    overall = np.quantile(res, [0.1, 0.9])
    assert len(b["edges"]) == 4 and len(b["quantiles"]) == 5
    q0 = b["quantiles"][0]  # the lowest band: never narrower than all runs (runs unlike the corpus take off from there)
    assert q0[0] <= overall[0] + 1e-12 and q0[1] >= overall[1] - 1e-12
    widths = [q[1] - q[0] for q in b["quantiles"]]
    assert widths[2] > widths[0] and widths[2] > widths[4]  # the middle band is the undecided one
    assert widths[4] < overall[1] - overall[0]  # a run the corpus calls a success keeps its band's own, narrower width
    lo, hi = interval_bounds(np.array([0.05, 0.5]), list(overall), b)
    assert hi[1] - lo[1] > hi[0] - lo[0] and lo[0] >= 0
    flat_lo, flat_hi = interval_bounds(np.array([0.5]), list(overall))
    assert flat_hi[0] - flat_lo[0] == pytest.approx(overall[1] - overall[0])
    assert residual_bands(pred[:50], res[:50], [0.1, 0.9], 5)["edges"] == []  # too few runs for five bands


# --- stages, API and CLI on the tiny run ---------------------------------------------------------------------


def test_outcome_stages_and_api(tiny_run):
    root, cfg, results = tiny_run
    m = json.loads((Path(cfg.paths.plots) / "outcome.json").read_text())
    assert "pooled" in m["results"] and "epoch_1" in m["results"]["pooled"] and "pooled" in m["ablation"]
    assert set(m["results"]["pooled"]["epoch_2"]) == {"telemetry", "telemetry_unstated", "loss_acc", "naive"}
    assert set(m["leave_one_domain_out"]) == {"mlp_digits", "cnn_digits"} and m["leave_one_optimizer_out"]
    # a held-out domain is also answered by the same fit with its architecture and dataset stated; an optimizer is not
    assert all("r2" in g["epoch_2"]["telemetry_parts_stated"] for g in m["leave_one_domain_out"].values())
    assert not any("telemetry_parts_stated" in g.get("epoch_2", {}) for g in m["leave_one_optimizer_out"].values())
    assert "lodo_mean_r2_epoch2_parts_stated" in m["summary"]
    assert "curve" in m["group_ablation"]["epoch_2"] and 0 <= m["calibration"]["epoch_2"]["interval_coverage_unstated"] <= 1
    runs = pl.read_parquet(cfg.paths.outcome_runs)
    tel = pl.read_parquet(cfg.paths.outcome_telemetry)
    rid = runs["run_id"][0]
    table = tel.filter(pl.col("run_id") == rid).drop("run_id").filter(pl.col("epoch") <= 2)
    out = predict(table, domain=runs["domain"][0], models_dir=cfg.paths.outcome_models)
    assert 0 <= out.final_test_accuracy <= 1 and 0 <= out.failure_probability <= 1 and out.epoch == 2 and out.epochs_seen == 2
    assert out.relative_class in (0, 1, 2) and sum(out.relative_class_probabilities) == pytest.approx(1.0)
    stated = predict(table, domain=runs["domain"][0], schedule=runs["schedule"][0], models_dir=cfg.paths.outcome_models)
    assert stated.schedule == runs["schedule"][0] and 0 <= stated.final_test_accuracy <= 1
    with pytest.raises(PrenetError, match="not a schedule; choose one of constant"):
        predict(table, schedule="linear", models_dir=cfg.paths.outcome_models)
    with pytest.warns(UserWarning, match="unknown domain") as w:
        assert predict(table, domain="vit_imagenet", models_dir=cfg.paths.outcome_models).scope == "unknown"
    assert "did you mean" not in str(w[0].message)
    typo = runs["domain"][0][:-1] + "x"  # a misspelt corpus domain: the warning names the one meant
    with pytest.warns(UserWarning, match=f"did you mean '{runs['domain'][0]}'"):
        predict(table, domain=typo, models_dir=cfg.paths.outcome_models)


def test_resume_corpus_reuses_a_corpus_and_refuses_other_settings(tiny_run, tmp_path, capsys):
    import importlib.util

    from conftest import tiny_overrides

    from pipeline.config import compose
    from pipeline.corpus import corpus

    _, cfg, _ = tiny_run
    runs, tel = pl.read_parquet(cfg.paths.outcome_runs), pl.read_parquet(cfg.paths.outcome_telemetry)
    assert runs.height == 2 * (8 + 2) + 2 + 2  # tiny: 2 domains × (8 runs + 2 take-off runs), 2 heavy-ball and 2 user-loop runs on its MLP one
    src = tmp_path / "vendored"
    src.mkdir()
    runs.drop("split").write_parquet(src / "runs.parquet")
    tel.drop("lr", "momentum", "adaptive").write_parquet(src / "telemetry.parquet")  # recorded before the optimizer columns
    from pipeline.corpus import generating_settings

    (src / "provenance.json").write_text(json.dumps({"settings": {**generating_settings(cfg), "seed": -1}}))
    spec = importlib.util.spec_from_file_location("resume_corpus", Path(__file__).parents[1] / "scripts" / "resume_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    other = tmp_path / "other"
    assert mod.main(["--from", str(src), *tiny_overrides(other)]) == 2  # recorded with another seed
    assert "made with other settings (seed)" in capsys.readouterr().err
    (src / "provenance.json").write_text(json.dumps({"settings": generating_settings(cfg)}))
    assert mod.main(["--from", str(src), *tiny_overrides(other, "outcome.corpus.space.widths=[32]")]) == 2
    assert "made with other settings (space)" in capsys.readouterr().err
    # the recorded settings are those of a corpus before the take-off phase: its runs are still planned
    before = generating_settings(cfg)
    before["corpus"] = {k: v for k, v in before["corpus"].items() if not k.startswith("takeoff_") and k != "enrich"}  # nor a recipe
    assert mod.settings_changed(before, generating_settings(cfg)) == []
    assert mod.settings_changed(None, generating_settings(cfg)) == ["all (no recorded settings)"]
    edited = tmp_path / "edited"  # a run whose configuration no longer hashes to its id
    shutil.copytree(src, edited)
    runs.drop("split").with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.col("lr") * 2).otherwise(pl.col("lr")).alias("lr")).write_parquet(
        edited / "runs.parquet"
    )
    assert mod.main(["--from", str(edited), *tiny_overrides(other)]) == 2
    assert "1 runs of" in capsys.readouterr().err
    new = tmp_path / "new"
    assert mod.main(["--from", str(src), *tiny_overrides(new)]) == 0
    out = capsys.readouterr().out
    assert f"{runs.height} runs of" in out and "predates the lr, momentum, adaptive columns" in out
    cfg2 = compose(tiny_overrides(new))
    corpus(cfg2)  # every planned run is in the seeded shard: nothing is trained again
    again = pl.read_parquet(cfg2.paths.outcome_runs).sort("run_id")
    assert again["final_test_accuracy"].to_list() == runs.sort("run_id")["final_test_accuracy"].to_list()
    assert again["wall_seconds"].to_list() == runs.sort("run_id")["wall_seconds"].to_list()
    lr = pl.read_parquet(cfg2.paths.outcome_telemetry).sort("run_id", "epoch")["lr"].to_numpy()  # the runs' own settings
    np.testing.assert_allclose(lr, tel.sort("run_id", "epoch")["lr"].to_numpy(), rtol=1e-9)


def test_outcome_cli(tiny_run, tmp_path, capsys):
    _, cfg, _ = tiny_run
    tel = pl.read_parquet(cfg.paths.outcome_telemetry)
    f = tmp_path / "run.csv"
    tel.filter(pl.col("run_id") == tel["run_id"][0]).drop("run_id").write_csv(f)
    assert main(["predict", "outcome", "--telemetry", str(f), "--models", cfg.paths.outcome_models]) == 0
    shown = capsys.readouterr().out
    assert "not an automatic stop" in shown and "epochs, the length of the corpus's runs, not of yours)" in shown  # what "final" means
    assert "(80 % interval " in shown  # the interval says what it covers (the tiny run's residual quantiles 0.1-0.9)
    assert "plain training log" not in shown  # a Recorder's table
    from prenet.outcome.models import load, residual_key
    from prenet.outcome.predict import predict, render_outcome
    from prenet.outcome.telemetry_input import PLAIN_LOG_COLUMNS

    loaded = load(cfg.paths.outcome_models)
    run = tel.filter(pl.col("run_id") == tel["run_id"][0]).drop("run_id")
    with pytest.warns(UserWarning, match="has no"):
        plain = predict(run.select([c for c in PLAIN_LOG_COLUMNS if c in run.columns]), loaded=loaded)
    full = predict(run, loaded=loaded)
    assert plain.plain_log and not full.plain_log and residual_key(plain.epoch, False, plain=True) in loaded[1]["residual_quantiles"]
    assert "a plain training log (no Recorder probes)" in render_outcome(plain)
    from prenet.outcome.predict import Outcome, render_outcome

    stuck = Outcome(0.3, (0.1, 0.85), 0.6, 0, [1.0, 0.0, 0.0], 2, "unknown", 2, None, accuracy_now=0.12, may_take_off=True)
    assert "may still take off    accuracy 0.12 now, but runs like it ended as high as 0.85" in render_outcome(stuck)
    stuck.take_off_probability, stuck.take_off_base_rate = 0.62, 0.37
    assert "accuracy 0.12 now, but 62 % of runs like it went on to succeed (of all runs this slow: 37 %)" in render_outcome(stuck)
    stuck.may_take_off, stuck.take_off_probability = False, 0.21  # slow, but less likely than most slow runs to take off
    text = render_outcome(stuck)
    assert "take-off chance       21 % for this run, against 37 % of the corpus's runs this slow at epoch 2 (accuracy 0.12 now)" in text
    assert "may still take off" not in text
    assert "take off" not in render_outcome(Outcome(0.9, (0.8, 1.0), 0.0, 2, [0, 0, 1.0], 2, "unknown", 2))
    assert main(["predict", "outcome", "--telemetry", str(tmp_path / "missing.csv"), "--models", cfg.paths.outcome_models]) == 2
    assert capsys.readouterr().err.startswith("error: telemetry file")
    assert main(["predict", "outcome", "--telemetry", str(tmp_path), "--models", cfg.paths.outcome_models]) == 2
    assert "is a folder; give the CSV or parquet file" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("epoch,train_accuracy\n1,0.5\n")
    assert main(["predict", "outcome", "--telemetry", str(bad), "--models", cfg.paths.outcome_models]) == 2
    assert "column 'train_loss': required column is missing" in capsys.readouterr().err
    least = tmp_path / "least.csv"  # the three required columns alone are an answer, with one warning naming the rest
    least.write_text("epoch,train_loss,train_accuracy\n1,2.1,0.3\n2,1.5,0.5\n")
    assert main(["predict", "outcome", "--telemetry", str(least), "--models", cfg.paths.outcome_models]) == 0
    out, err = capsys.readouterr()
    assert "final test accuracy" in out and err.count("warning:") == 1 and f"{least} has no" in err and "minibatches" in err
    diverged = tmp_path / "diverged.csv"  # the Recorder writes a non-finite loss empty: a failure by definition, said
    diverged.write_text("epoch,train_loss,train_accuracy\n1,2.1,0.3\n2,,0.1\n")
    assert main(["predict", "outcome", "--telemetry", str(diverged), "--models", cfg.paths.outcome_models]) == 0
    out = capsys.readouterr().out
    assert "failure probability   1.000   (the training loss was not finite from epoch 2" in out and "take off" not in out
    assert predict(pl.read_csv(least), models_dir=cfg.paths.outcome_models).diverged_at is None
    binary = tmp_path / "net.csv"  # not a CSV at all: one line, without the reader's hints on further lines
    binary.write_bytes(b"import torch\nx = [1,\n 2, 3]\n\x00\x01,,,\n")
    assert main(["predict", "outcome", "--telemetry", str(binary), "--models", cfg.paths.outcome_models]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    text = tmp_path / "text.csv"
    text.write_text("epoch,train_loss,train_accuracy\n1,2.3,0.1\n2,abc,0.2\n")
    assert main(["predict", "outcome", "--telemetry", str(text), "--models", cfg.paths.outcome_models]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "column 'train_loss', row 2: 'abc' is not a number" in err
    stale = tmp_path / "stale_models"  # models trained on other features than the code computes: retrain, in one line
    shutil.copytree(cfg.paths.outcome_models, stale)
    man = json.loads((stale / "manifest.json").read_text())
    first = next(iter(man["features"]))
    man["features"][first] = man["features"][first][:-1]
    (stale / "manifest.json").write_text(json.dumps(man))
    assert main(["predict", "outcome", "--telemetry", str(f), "--models", str(stale)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "retrain: dvc repro train_outcome" in err


def _good_table() -> pl.DataFrame:
    from prenet.telemetry.recorder import telemetry_schema

    rows = [
        {c: (e if c == "epoch" else 10 if c == "minibatches" else 0.0 if c == "adaptive" else 0.5) for c in telemetry_schema()} for e in (1, 2, 3)
    ]
    return pl.DataFrame(rows, schema=telemetry_schema())


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.with_columns(pl.Series("train_accuracy", [0.2, 1.7, 0.5])),
            "column 'train_accuracy', row 2: 1.7 breaks the rule train_accuracy <= 1",
        ),
        (lambda t: t.with_columns(pl.Series("epoch", [1, 2, 2])), "column 'epoch', row 3: epoch 2 repeats row 2"),
        (lambda t: t.with_columns(pl.Series("epoch", [1, 2, 4])), "column 'epoch': epoch 3 is missing"),
        (lambda t: t.with_columns(pl.lit(1.0).alias("test_loss")), "column 'test_loss': unknown column"),
        (lambda t: t.rename({"train_accuracy": "train_acc"}), "column 'train_acc': unknown column; another tool's name for 'train_accuracy'?"),
        # a Keras History's names: the column each stands for, not the closest spelling ('loss' -> 'val_loss')
        (lambda t: t.rename({"train_loss": "loss"}), "column 'loss': unknown column; another tool's name for 'train_loss'? rename it to that"),
        (lambda t: t.rename({"val_accuracy": "val_acc"}), "column 'val_acc': unknown column; another tool's name for 'val_accuracy'?"),
        (lambda t: t.rename({"val_loss": "val_los"}), "column 'val_los': unknown column; did you mean 'val_loss'?"),
        (
            lambda t: pl.DataFrame({"epoch;train_loss;train_accuracy": ["1;0.5;0.8"]}),
            "the header reads as one column: the file is not comma-separated",
        ),
        (
            lambda t: t.with_columns(pl.Series("train_accuracy", [24.5, 61.0, 80.0])),
            "24.5 breaks the rule train_accuracy <= 1 (accuracies are fractions: divide percentages by 100)",
        ),
        (lambda t: t.with_columns(pl.Series("epoch", [0, 1, 2])), "0 breaks the rule epoch >= 1 (number the epochs from 1"),
        (lambda t: t.with_columns(pl.Series("train_loss", ["1.0", "x", "2"])), "column 'train_loss', row 2: 'x' is not a number"),
        (lambda t: t.head(0), "the table has no rows"),
        (lambda t: t.with_columns(pl.Series("lr", [0.1, 0.0, 0.1])), "column 'lr', row 2: 0 breaks the rule lr > 0"),
        (lambda t: t.with_columns(pl.Series("momentum", [0.9, 0.9, 1.0])), "column 'momentum', row 3: 1 breaks the rule momentum < 1"),
        (lambda t: t.with_columns(pl.Series("adaptive", [0.5, 0.0, 0.0])), "column 'adaptive', row 1: 0.5 breaks the rule adaptive in {0, 1}"),
        (  # a later column polars cannot cast at all does not hide the first broken rule (the one-pass check falls back)
            lambda t: t.with_columns(pl.Series("train_loss", ["1.0", "x", "2"]), pl.Series("lr", [[0.1], [0.1], [0.1]])),
            "column 'train_loss', row 2: 'x' is not a number",
        ),
    ],
)
def test_bad_telemetry_is_one_line_naming_column_row_and_rule(edit, message):
    from prenet.outcome.telemetry_input import TelemetryError, check_telemetry

    assert check_telemetry(_good_table()).height == 3
    with pytest.raises(TelemetryError) as e:
        check_telemetry(edit(_good_table()), source="run.csv")
    assert message in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("run.csv: ")


def test_non_finite_telemetry_reads_as_empty_with_a_warning():
    from prenet.outcome.telemetry_input import TelemetryError, check_telemetry

    # a diverged run as a training loop logs it: NaN and inf, read as the recorder writes them (empty)
    t = _good_table().with_columns(pl.Series("train_loss", [1.0, float("nan"), float("inf")]), pl.Series("grad_norm", [1.0, float("nan"), 1.0]))
    with pytest.warns(UserWarning, match=r"run.csv: column 'train_loss', row 2: nan is not finite; read as empty.*, and 2 more"):
        out = check_telemetry(t, source="run.csv")
    assert out["train_loss"].to_list() == [1.0, None, None] and out["grad_norm"].to_list() == [1.0, None, 1.0]
    # ... but a column that needs a value in every row refuses one, in one line
    with pytest.raises(TelemetryError, match=r"^run.csv: column 'train_accuracy', row 2: nan is not finite; this column needs a finite value"):
        check_telemetry(_good_table().with_columns(pl.Series("train_accuracy", [0.2, float("nan"), 0.4])), source="run.csv")


def test_absent_optional_telemetry_columns_warn_and_are_empty():
    from prenet.outcome.telemetry_input import check_telemetry

    with pytest.warns(UserWarning, match="has no grad_norm"):
        out = check_telemetry(_good_table().drop("grad_norm"))
    assert out["grad_norm"].null_count() == 3
    with pytest.warns(UserWarning, match=r"has no lr, momentum, adaptive; .*Recorder\(model, optimizer=opt\)"):
        check_telemetry(_good_table().drop("lr", "momentum", "adaptive"))


def test_the_recorder_reads_what_each_optimizer_is():
    """Momentum or β₁ and whether the optimizer is adaptive, from its first group; unknown kinds and an lr that is not a
    number stay empty rather than guessed (or crash the user's loop)."""
    from prenet.telemetry.recorder import Recorder, optimizer_settings

    p = [nn.Parameter(torch.zeros(2))]
    got = {
        name: optimizer_settings(opt)
        for name, opt in {
            "sgd": torch.optim.SGD(p, lr=0.1),
            "nesterov": torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
            "adam": torch.optim.Adam(p, betas=(0.8, 0.99)),
            "rmsprop": torch.optim.RMSprop(p, momentum=0.5),
            "lbfgs": torch.optim.LBFGS(p),
        }.items()
    }
    assert got["sgd"] == {"momentum": 0.0, "adaptive": 0.0} and got["nesterov"] == {"momentum": 0.9, "adaptive": 0.0}
    assert got["adam"] == {"momentum": 0.8, "adaptive": 1.0} and got["rmsprop"] == {"momentum": 0.5, "adaptive": 1.0}
    assert got["lbfgs"]["adaptive"] is None
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.param_groups[0]["lr"] = None  # e.g. Adafactor's relative step
    rec = Recorder(model, optimizer=opt)
    model(torch.ones(4, 2)).sum().backward()
    rec.after_backward()
    row = rec.end_epoch(train_loss=1.0, train_accuracy=0.5)
    assert row["lr"] is None and row["momentum"] == 0.0


def test_out_of_corpus_runs_are_a_users_loop_outside_the_prior():
    from prenet.outcome.out_of_corpus import digits_splits, late_bloomer_share, sample_specs, train_run

    specs = sample_specs(40, seed=3, epochs=3)
    assert {s.activation for s in specs} == {"relu", "tanh"} and max(s.init_scale for s in specs) > 2 and min(s.lr for s in specs) < 1e-2
    assert sample_specs(40, seed=3, epochs=3) == specs  # reproducible
    data = digits_splits(0)
    assert sum(len(y) for _, y in data.values()) == 1797
    table, final, diverged = train_run(specs[0], data)
    assert table.height == 3 and set(table["epoch"].to_list()) == {1, 2, 3} and 0.0 <= final <= 1.0 and not diverged
    runs = pl.DataFrame({"run_id": ["a", "b", "c"], "final_test_accuracy": [0.9, 0.9, 0.3]})
    tel = pl.DataFrame({"run_id": ["a", "b", "c"], "epoch": [2, 2, 2], "train_accuracy": [0.3, 0.7, 0.2], "val_accuracy": [0.4, 0.8, None]})
    assert late_bloomer_share(runs, tel) == pytest.approx(1 / 3)  # a: below 0.5 at epoch 2, at least 0.8 at the end


def test_out_of_corpus_stage_scores_the_shipped_runs(tiny_run):
    from omegaconf import OmegaConf

    from pipeline.artifacts import read_artifact
    from pipeline.evaluate_outcome_ooc import evaluate_outcome_ooc
    from prenet.outcome.out_of_corpus import seed_spread

    _, cfg, _ = tiny_run
    assert cfg.outcome.out_of_corpus.max_runs == 48  # the first 48 of the shipped runs (experiment=tiny): the stage, not its figures
    res = evaluate_outcome_ooc(cfg)
    runs = pl.read_parquet(Path(cfg.paths.outcome_ooc) / "runs.parquet").head(48)
    n = runs.height
    assert res["runs"] == n == 48 and set(res["by_epoch"]) == {"1", "2", "3", "5"}
    beyond = res["beyond"]  # the runs beyond every corpus recipe, scored the same way
    assert beyond["runs"] == 48 and set(beyond["by_epoch"]) == {"1", "2", "3", "5"} and beyond["seed_ceiling"]["runs"] == 48
    assert res["summary"]["beyond_r2_epoch2"] == beyond["by_epoch"]["2"]["r2"][0]
    for m in res["by_epoch"].values():
        point, low, high = m["r2"]
        assert low <= point <= high and m["answered"] <= n and 0 <= m["failure_auc"][0] <= 1
        assert m["plain_log_r2"][1] <= m["plain_log_r2"][0] <= m["plain_log_r2"][2]  # the same runs as plain logs
        assert 0 <= m["interval"]["plain_log_coverage"] <= 1  # their intervals, from plain logs' residuals
    assert 0 <= res["late_bloomer_share"] <= 1 and 0 <= res["corpus_late_bloomer_share"] <= 1
    e2 = res["by_epoch"]["2"]
    assert 0 <= e2["interval"]["coverage"] <= 1 and e2["interval"]["nominal"] == pytest.approx(0.8)
    assert 0 <= e2["failure_reliability"]["ece"] <= 1 and sum(b["n"] for b in e2["failure_reliability"]["bins"]) == n
    ab = res["group_ablation"]
    assert ab["epoch"] == 2 and set(ab["groups"]) == {"curve", "trend", "within", "gradient", "weights", "optimizer"} and ab["runs"] <= n
    assert all(np.isfinite(v["r2"]["difference"]) for v in ab["groups"].values())
    flag = e2["take_off_flag"]
    assert flag["late_bloomers"] == round(n * res["late_bloomer_share"]) and flag["late_bloomers_flagged"] <= flag["flagged"]
    spread = res["seed_spread"]
    bag = int(cfg.outcome.predictor.bag)  # each refit a whole bag, the bags' seeds apart
    assert spread["seeds"] == [int(cfg.seed), int(cfg.seed) + bag] and set(spread["by_epoch"]) == {"2"}
    assert spread["by_epoch"]["2"]["r2"][0] == e2["r2"][0]  # wiring: the stage hands the trained models' R² in as known
    # ... which is what refitting the stage's seed gives, to 1e-9 (so the stage need not refit it)
    corpus_runs = read_artifact(cfg, "outcome_runs")
    tel = pl.read_parquet(Path(cfg.paths.outcome_ooc) / "telemetry.parquet").filter(pl.col("run_id").is_in(runs["run_id"].implode()))
    params = OmegaConf.to_container(cfg.outcome.predictor, resolve=True)
    dev = corpus_runs.filter(pl.col("split") != "holdout")
    refit = seed_spread(
        runs, tel, dev, read_artifact(cfg, "outcome_telemetry"), cfg.paths.outcome_models, epochs=[2], seeds=[int(cfg.seed)], params=params
    )
    assert refit["by_epoch"]["2"]["r2"][0] == pytest.approx(e2["r2"][0], abs=1e-9)


def test_a_vendored_corpus_from_an_older_recorder_reads_with_its_new_columns_empty(tmp_path):
    from pipeline.config import compose
    from pipeline.corpus import read_vendored
    from prenet.data.io import read_table

    shipped, old = Path("data/outcome/vendored"), tmp_path / "old"
    old.mkdir()
    shutil.copy(shipped / "provenance.json", old / "provenance.json")
    runs = pl.read_parquet(shipped / "runs.parquet").head(40)
    runs.write_parquet(old / "runs.parquet")
    tel = pl.read_parquet(shipped / "telemetry.parquet").filter(pl.col("run_id").is_in(runs["run_id"].implode()))
    tel.drop([c for c in ("loss_end", "loss_trend", "grad_norm_trend") if c in tel.columns]).write_parquet(old / "telemetry.parquet")
    cfg = compose(["progress=false", f"paths.root={tmp_path / 'data'}", f"paths.outcome_vendored={old}"])
    assert read_vendored(cfg)["runs"] == 40
    out = read_table(cfg.paths.outcome_telemetry)
    assert out.height == tel.height and out["loss_trend"].null_count() == out.height and out["grad_norm_trend"].null_count() == out.height


def test_the_beyond_prior_lies_outside_every_corpus_recipe():
    from pipeline.config import compose
    from prenet.outcome.out_of_corpus import sample_specs

    corpus = compose([]).outcome.corpus
    spaces = [corpus.space, *(r.space for r in corpus.enrich.values())]
    depths = {d for sp in spaces for d in sp.get("depths", corpus.space.depths)}
    activations = {a for sp in spaces for a in sp.get("activations", corpus.space.activations)}
    low, high = corpus.space.init_scale_range
    specs = sample_specs(240, 11, prior="beyond")
    assert all(s.depth > max(depths) and s.activation not in activations for s in specs)  # architectures the corpus lacks
    assert {s.optimizer for s in specs} == {"nesterov", "rmsprop"} and all(s.momentum == (0.95 if s.optimizer == "nesterov" else 0.0) for s in specs)
    outside = np.mean([not low <= s.init_scale <= high for s in specs])
    assert 0.35 < outside < 0.65  # half the init scales beyond the corpus's range, half inside
    shipped = pl.read_parquet("data/outcome/out_of_corpus/runs.parquet")  # the user_loop draws are the shipped runs'
    keys = ("run_id", "width", "depth", "activation", "init_scale", "lr", "momentum", "batch")
    drawn = pl.DataFrame([{k: getattr(s, k) for k in keys} for s in sample_specs(240, 7)])
    assert drawn.equals(shipped.select(drawn.columns)) and {s.optimizer for s in sample_specs(240, 7)} == {"sgd"}
    beyond = pl.read_parquet("data/outcome/beyond_corpus/runs.parquet")  # and the beyond draws the shipped beyond runs'
    assert beyond["run_id"].to_list() == [s.run_id for s in specs] and beyond["lr"].to_list() == [s.lr for s in specs]
    with pytest.raises(ValueError, match="prior"):
        sample_specs(3, 7, prior="wide")


def test_seed_ceiling_is_the_r2_of_knowing_each_setting_exactly():
    from prenet.outcome.out_of_corpus import seed_ceiling

    runs = pl.DataFrame({"run_id": ["a", "b", "c", "d"], "final_test_accuracy": [0.1, 0.9, 0.5, 0.7]})
    same = seed_ceiling(runs, runs)
    assert same["r2_ceiling"] == pytest.approx(1.0) and same["mean_abs_difference"] == 0.0 and same["runs"] == 4
    other = runs.with_columns(pl.Series("final_test_accuracy", [0.3, 0.9, 0.5, 0.5]))  # two settings moved by 0.2
    c = seed_ceiling(runs, other)
    ya, yb = np.array([0.1, 0.9, 0.5, 0.7]), np.array([0.3, 0.9, 0.5, 0.5])
    assert c["r2_ceiling"] == pytest.approx(1 - np.mean((ya - yb) ** 2) / (2 * np.var(np.concatenate([ya, yb]))))
    assert c["mean_abs_difference"] == pytest.approx(0.1)


def test_a_run_that_may_take_off_gets_the_mixtures_interval():
    from prenet.outcome.models import take_off_interval

    took = list(np.linspace(0.6, 1.0, 21))  # the slow runs that took off ended at 0.6-1.0
    lo, hi = take_off_interval(
        np.array([0.1, 0.1, 0.1, 0.1]), np.array([0.3] * 4), np.array([0.5, 0.05, 0.5, np.nan]), np.array([1, 1, 0, 1]), took, 0.9
    )
    # p = 0.5: the 0.9 quantile of the mixture is the take-off group's 0.8 quantile (0.92); p = 0.05 < 0.1: unchanged
    assert hi == pytest.approx([0.92, 0.3, 0.3, 0.3]) and lo == pytest.approx([0.1] * 4)
    assert take_off_interval(np.array([0.1]), np.array([0.3]), np.array([0.9]), np.array([True]), [], 0.9)[1] == pytest.approx([0.3])


def test_a_plain_training_log_is_a_case_the_model_has_seen():
    """Every feature a Keras- or Lightning-style log (epoch, losses, accuracies, nothing from the Recorder) leaves
    empty is masked together in a share of the training copies, except the domain and schedule (masked on their own)."""
    from prenet.outcome.features import OPTIONAL_MASKS, PLAIN_LOG, _groups, feature_names, mask_groups, single_run
    from prenet.outcome.telemetry_input import check_telemetry

    log = pl.DataFrame(
        {
            "epoch": [1, 2, 3],
            "train_loss": [1.9, 1.2, 0.8],
            "train_accuracy": [0.35, 0.6, 0.75],
            "val_loss": [1.8, 1.3, 0.9],
            "val_accuracy": [0.4, 0.58, 0.7],
        }
    )
    with pytest.warns(UserWarning, match="has no"):
        table = check_telemetry(log)
    names = feature_names(3, "telemetry")
    empty = {n for n, v in zip(names, single_run(table, 3)[0]) if np.isnan(v)} - set(_groups(3)["domain"]) - set(_groups(3)["schedule"])
    masked = {n for n, v in zip(names, mask_groups(np.ones((1, len(names))), 3, "telemetry", tuple(PLAIN_LOG.split("|")))[0]) if np.isnan(v)}
    assert empty and empty <= masked, sorted(empty - masked)
    assert not {n for n in masked if n.startswith(("train_loss", "train_accuracy", "val_", "loss_exponent"))}  # what the log has stays
    assert OPTIONAL_MASKS[PLAIN_LOG] > 0
