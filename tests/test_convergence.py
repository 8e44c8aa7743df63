"""Convergence predictor: pure functions on small real inputs (digits, tiny nets), and the stages' outputs."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

from prenet import datasets
from prenet.convergence import dynamics, forecast, losses, targets
from prenet.convergence.baselines import curve_fit_forecast
from prenet.convergence.ntk import ProblemTooLargeError, empirical_ntk, gram, jacobian, relative_error
from prenet.convergence.training import dense_curve, finetune, log_grid, logging_view
from prenet.errors import PrenetError


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to evaluate_convergence (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("evaluate_convergence")


@pytest.fixture(scope="module")
def digits_small():
    d = datasets.load("digits").select([0, 1, 2], limit=48, seed=0)
    return d.x, d.y


def _mlp(classes: int = 3, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, classes))


def _linear(classes: int = 3, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, classes))


# --- data ---------------------------------------------------------------------------------------------------


def test_digits_split_is_fixed_and_standardised():
    tr, te = datasets.load("digits", "train"), datasets.load("digits", "test")
    assert tr.x.shape[1:] == (1, 8, 8) and len(tr) + len(te) == 1797
    assert abs(float(tr.x.mean())) < 1e-4 and abs(float(tr.x.std()) - 1) < 1e-2
    assert torch.equal(datasets.load("digits", "test").y, te.y)


def test_fashion_checksum_mismatch_is_reported(tmp_path, monkeypatch):
    for name in datasets.FASHION_SHA256:
        (tmp_path / name).write_bytes(gzip.compress(b"not fashion mnist"))
    monkeypatch.setenv("PRENET_FASHION_MNIST_DIR", str(tmp_path))
    datasets._fashion.cache_clear()
    with pytest.raises(PrenetError, match="SHA-256 .* expected .* apt-get install --reinstall dataset-fashion-mnist"):
        datasets.load("fashion_mnist")
    datasets._fashion.cache_clear()


def test_absent_fashion_is_an_error_never_a_substitute(tmp_path, monkeypatch):
    monkeypatch.setenv("PRENET_FASHION_MNIST_DIR", str(tmp_path / "absent"))
    with pytest.raises(PrenetError, match="not installed .* apt-get install dataset-fashion-mnist"):
        datasets.load("fashion_mnist", "test")
    with pytest.raises(PrenetError, match="not installed"):
        datasets.require_datasets({"digits", "fashion_mnist"})
    datasets.require_datasets({"digits"})


def test_corpus_stage_stops_before_work_without_fashion(tiny_cfg, tmp_path, monkeypatch):
    from pipeline.corpus import corpus

    monkeypatch.setenv("PRENET_FASHION_MNIST_DIR", str(tmp_path / "absent"))
    cfg = copy.deepcopy(tiny_cfg)
    cfg.outcome.corpus.domains = ["mlp_digits", "mlp_fashion"]
    with pytest.raises(PrenetError, match="dataset-fashion-mnist"):
        corpus(cfg)
    assert not any(tmp_path.rglob("*.jsonl"))


@pytest.mark.skipif(not datasets.fashion_mnist_available(), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_loads_verified():
    d = datasets.load("fashion_mnist", "test")
    assert d.x.shape == (10000, 1, 28, 28) and sorted(d.y.unique().tolist()) == list(range(10))


def test_select_relabels_and_limits(digits_small):
    d = datasets.load("digits").select(None, relabel={i: i % 2 for i in range(10)}, limit=100, seed=1)
    assert len(d) == 100 and set(d.y.tolist()) == {0, 1}


# --- NTK -----------------------------------------------------------------------------------------------------


def test_exact_ntk_equals_jacobian_products_by_autograd(digits_small):
    x, _ = digits_small
    model = _mlp()
    x = x[:5]
    rows = []
    for i in range(len(x)):
        out = model(x[i : i + 1])[0]
        for c in range(out.shape[0]):
            g = torch.autograd.grad(out[c], list(model.parameters()), retain_graph=True)
            rows.append(torch.cat([t.reshape(-1) for t in g]))
    J = torch.stack(rows).double()
    k = empirical_ntk(model, x, method="exact")
    assert np.allclose(k.theta, (J @ J.T).numpy(), rtol=1e-4, atol=1e-5)
    assert jacobian(model, x, chunk=2).shape == (15, sum(p.numel() for p in model.parameters()))


def test_projection_error_shrinks_with_more_directions(digits_small):
    x, _ = digits_small
    model = _mlp()
    exact = empirical_ntk(model, x[:16], method="exact").theta
    errs = [relative_error(empirical_ntk(model, x[:16], method="projection", proj_dim=k, seed=0).theta, exact) for k in (20, 2000)]
    assert errs[1] < errs[0] and errs[1] < 0.1


def test_too_large_problem_fails_early_with_sizes(digits_small):
    x, _ = digits_small
    with pytest.raises(ProblemTooLargeError, match=r"N=48 samples × C=3 outputs × P=1,091 parameters.*To fix"):
        empirical_ntk(_mlp(), x, method="exact", max_bytes=10_000)


# --- dynamics ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss,momentum,batch", [("mse", 0.0, 48), ("cross_entropy", 0.9, 12), ("mse", 0.5, 8)])
def test_linearized_sgd_is_exact_for_a_model_linear_in_its_parameters(digits_small, loss, momentum, batch):
    """For f(x) = W x + b the linearization is exact: simulating SGD in function space must reproduce torch SGD."""
    x, y = digits_small
    model = _linear()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    L_sim, A_sim = dynamics.linear_sgd(
        theta, F0, y.numpy(), kind=loss, lr=0.01, momentum=momentum, batches=dynamics.batch_schedule(len(y), batch, 30, seed=3)
    )
    real = finetune(copy.deepcopy(model), x, y, loss=loss, lr=0.01, momentum=momentum, batch_size=batch, steps=30, seed=3)
    assert np.allclose(L_sim, real.loss, rtol=1e-4)
    assert np.allclose(A_sim, real.accuracy)


def test_mse_ode_matches_small_step_gradient_descent(digits_small):
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    lr, steps = 0.002, 100
    L_ode, _ = dynamics.ode(theta, F0, y.numpy(), kind="mse", lr=lr, momentum=0.0, steps=steps)
    L_gd, _ = dynamics.linear_sgd(theta, F0, y.numpy(), kind="mse", lr=lr, momentum=0.0, batches=[np.arange(len(y))] * steps)
    assert np.allclose(L_ode, L_gd, rtol=0.03)
    assert L_ode[-1] < L_ode[0]


def test_cross_entropy_ode_and_sde_agree_without_noise(digits_small):
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    kw = dict(kind="cross_entropy", lr=0.01, momentum=0.0, steps=60)
    L_ode, _ = dynamics.ode(theta, F0, y.numpy(), **kw)
    L_sde, _ = dynamics.sde(theta, F0, y.numpy(), batch_size=len(y), paths=1, **kw)  # B = N: no noise, explicit Euler
    assert np.allclose(L_ode, L_sde, rtol=0.02)


def test_cross_entropy_sde_without_noise_is_the_discrete_gradient_step_below_its_stability_edge(digits_small):
    """Without momentum the SDE is the discrete map SGD runs: at B = N (no noise) it equals full-batch GD step for step,
    also where η λ_max(Θ)/N > 1.5 (which the MSE bound would sub-step) while cross-entropy's curvature (≤ ½) keeps the
    map stable; an MSE problem that stiff is sub-stepped towards gradient flow instead."""
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    n = len(y)
    lr = 2.5 * n / dynamics.top_eigenvalue(lambda v: theta @ v, theta.shape[0])  # η λ_max/N = 2.5: half of it ≤ 1.5
    full = [np.arange(n)] * 40
    L_sde, _ = dynamics.sde(theta, F0, y.numpy(), kind="cross_entropy", lr=lr, momentum=0.0, steps=40, batch_size=n, paths=1)
    L_gd, _ = dynamics.linear_sgd(theta, F0, y.numpy(), kind="cross_entropy", lr=lr, momentum=0.0, batches=full)
    assert np.allclose(L_sde, L_gd, rtol=1e-9)
    L_mse, _ = dynamics.sde(theta, F0, y.numpy(), kind="mse", lr=lr, momentum=0.0, steps=40, batch_size=n, paths=1)
    L_mse_gd, _ = dynamics.linear_sgd(theta, F0, y.numpy(), kind="mse", lr=lr, momentum=0.0, batches=full)
    assert not np.allclose(L_mse, L_mse_gd, rtol=1e-3)  # sub-stepped: closer to the flow than to the discrete map


def test_gram_equals_the_full_product():
    J = torch.randn(300, 77)  # rows not a multiple of the block
    assert torch.allclose(gram(J, block=128), J @ J.T, rtol=1e-5, atol=1e-4)


def test_sde_noise_slows_mse_convergence(digits_small):
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    kw = dict(kind="mse", lr=0.05, momentum=0.0, steps=200)
    L_ode, _ = dynamics.ode(theta, F0, y.numpy(), **kw)
    L_sde, _ = dynamics.sde(theta, F0, y.numpy(), batch_size=2, paths=16, seed=0, **kw)
    assert L_sde[-1] > L_ode[-1]


@pytest.mark.parametrize("loss,m", [("mse", 0.9), ("cross_entropy", 0.9), ("cross_entropy", 0.5)])
def test_momentum_ode_sde_and_exact_sgd_agree_and_beat_the_effective_lr_shortcut(digits_small, loss, m):
    """The three momentum dynamics on one problem small enough for all of them: the heavy-ball ODE against exact
    full-batch momentum GD, the velocity-carrying SDE against the exact linearized SGD averaged over batch orders —
    and the η/(1−m) first-order flow (the old shortcut) is farther from the exact curve than the second-order ODE."""
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    n, steps = len(y), 80
    lr = 0.02 if loss == "cross_entropy" else 0.002
    kw = dict(kind=loss, lr=lr, momentum=m)
    L_gd, _ = dynamics.linear_sgd(theta, F0, y.numpy(), batches=[np.arange(n)] * steps, **kw)
    L_ode, _ = dynamics.ode(theta, F0, y.numpy(), steps=steps, **kw)
    L_flat, _ = dynamics.ode(theta, F0, y.numpy(), kind=loss, lr=dynamics.effective_lr(lr, m), momentum=0.0, steps=steps)
    d_ode, d_flat = np.abs(L_ode - L_gd).max() / L_gd[0], np.abs(L_flat - L_gd).max() / L_gd[0]
    assert d_ode < 0.05 and d_ode < d_flat / 3
    L_exact, _ = dynamics.exact_sgd(theta, F0, y.numpy(), batch_size=12, steps=steps, paths=48, seed=0, **kw)
    L_sde, _ = dynamics.sde(theta, F0, y.numpy(), batch_size=12, steps=steps, paths=48, seed=0, **kw)
    assert np.abs(L_sde - L_exact).max() / L_exact[0] < 0.05
    # targets: the first step below half the initial loss agrees within a step or two
    tau = 0.5 * L_gd[0]
    assert abs(targets.steps_to_loss(L_ode, tau) - targets.steps_to_loss(L_gd, tau)) <= 2
    if m >= 0.9:  # the velocity's build-up (~1/(1 − m) steps) is what the η/(1 − m) shortcut skips
        assert targets.steps_to_loss(L_flat, tau) < targets.steps_to_loss(L_gd, tau) - 2


def test_heavy_ball_mode_decay_is_a_damped_oscillator():
    ts = np.arange(6.0)
    assert np.allclose(dynamics.heavy_ball_decay(np.array([0.3]), 0.0, ts)[:, 0], np.exp(-0.3 * ts))
    m = 0.9
    crit = (1 - m) ** 2 / (4 * m)  # critical damping: a repeated root
    a = np.array([0.0, 0.01, crit, crit * (1 + 1e-5), crit * (1 - 1e-5), 0.5])
    r = dynamics.heavy_ball_decay(a, m, np.array([0.0, 1e-4, 30.0, 200.0]))
    assert np.allclose(r[0], 1.0) and np.allclose(r[1], 1.0, atol=1e-6)  # r(0) = 1, r'(0) = 0
    assert r[3, 0] == pytest.approx(1.0) and (np.abs(r[3, 1:]) < 0.1).all()
    s0 = -(1 - m) / (2 * m)
    assert r[2, 2] == pytest.approx((1 - s0 * 30) * np.exp(s0 * 30))  # the critical branch
    assert r[2, 3] == pytest.approx(r[2, 2], rel=1e-3) and r[2, 4] == pytest.approx(r[2, 2], rel=1e-3)  # continuous across it


def test_divergence_is_decided_up_front_with_the_largest_stable_lr(digits_small):
    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = model(x).detach().double().numpy()
    lam = float(np.linalg.eigvalsh(theta)[-1]) / len(y)
    bound = dynamics.max_stable_lr(lam, 0.9)
    assert bound == pytest.approx(2 * 1.9 / lam)
    dynamics.check_stable(theta, F0, kind="mse", lr=0.99 * bound, momentum=0.9)
    with pytest.raises(dynamics.DivergenceError, match=r"the largest stable lr is"):
        dynamics.check_stable(theta, F0, kind="mse", lr=1.01 * bound, momentum=0.9)
    # the bound is the real one: exact full-batch momentum GD on the linearized model diverges just above it, not below
    for f, grows in ((0.95, False), (1.05, True)):
        L, _ = dynamics.linear_sgd(theta, F0, y.numpy(), kind="mse", lr=f * bound, momentum=0.9, batches=[np.arange(len(y))] * 400)
        assert (not np.isfinite(L[-1]) or L[-1] > L[0]) == grows
    t0 = time.perf_counter()
    with pytest.raises(PrenetError, match="diverges"):
        forecast(model, x, y, loss="mse", lr=1e6, momentum=0.9, batch_size=8, steps=10**6, probe_fraction=0.0)
    assert time.perf_counter() - t0 < 5  # answered at once, not after a million SDE steps


def test_targets_are_checked_before_any_work(digits_small):
    for kind, bad in (("accuracy", 0.0), ("accuracy", 90), ("loss", 0.0), ("loss", -1), ("relative_eps", 1.0)):
        with pytest.raises(PrenetError, match="cannot be reached"):
            targets.check_target(kind, bad)
    assert targets.check_target("accuracy", 1.0) == 1.0
    x, y = digits_small
    fc = forecast(_mlp(), x, y, loss="cross_entropy", lr=0.05, batch_size=48, steps=5, probe_fraction=0.0)
    with pytest.raises(PrenetError, match="an accuracy in"):
        fc.steps_to_accuracy(95)


def test_inputs_the_model_does_not_take_are_one_line(digits_small):
    """A fine-tuning set of another shape than the model's (a user's 4×4 crops for an 8×8 MLP), or a model whose output
    is not samples × classes, is one ``PrenetError`` naming the shapes, before any work, not torch's traceback."""
    x, y = digits_small
    user = _mlp().train()
    with pytest.raises(PrenetError, match=r"^forecast: the model does not run on these inputs \(one sample of shape \(1, 4, 4\)\): mat1 and mat2"):
        forecast(user, x[:, :, :4, :4], y, lr=0.05, batch_size=8, steps=5)
    assert user.training  # left as the caller had it
    with pytest.raises(PrenetError, match=r"output for one sample has shape \(1, 8, 8\)"):
        forecast(nn.Identity(), x, y, lr=0.05, batch_size=8, steps=5)


def test_the_default_answer_is_the_most_reliable_variant(digits_small):
    x, y = digits_small
    kw = dict(loss="cross_entropy", lr=0.5, momentum=0.9, batch_size=48, steps=60, seed=0, correction="probe")
    flagged = forecast(_mlp(), x, y, drift_threshold=0.0, **kw)  # every drift is above 0: the probe flags it
    assert flagged.variant == "corrected" and flagged.reliable is False and flagged.plain.variant == "plain"
    assert np.array_equal(flagged.loss, flagged.corrected.loss) and not np.array_equal(flagged.loss, flagged.plain.loss)
    assert flagged.steps_to_loss(0.5 * flagged.loss[0]) == targets.steps_to_loss(flagged.corrected.loss, 0.5 * flagged.loss[0])
    assert flagged.best() is flagged and flagged.corrected.variant == "corrected" and flagged.plain.corrected is flagged
    trusted = forecast(_mlp(), x, y, drift_threshold=1e9, **kw)
    assert trusted.variant == "plain" and trusted.plain is trusted and trusted.corrected is not None


def test_moving_the_weights_by_a_displacement_moves_a_linear_model_by_theta_times_it(digits_small):
    """w ← w − Jᵀ D changes the outputs by exactly −Θ D when the model is linear in its weights."""
    from prenet.convergence.forecaster import _move
    from prenet.convergence.ntk import outputs

    x, _ = digits_small
    model = _linear()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = outputs(model, x).double().numpy()
    D = np.random.default_rng(0).normal(size=F0.size) * 1e-3
    _move(model, x, D)
    np.testing.assert_allclose(outputs(model, x).double().numpy().reshape(-1), F0.reshape(-1) - theta @ D, atol=1e-5)


def test_trajectory_correction_relinearizes_only_where_the_kernel_moves(digits_small):
    x, y = digits_small
    # no cost target: the mechanism alone, not this host's speed (the dearer-than-the-fine-tune ceiling and the budget,
    # which time real steps, are tested on their own below)
    kw = dict(loss="cross_entropy", momentum=0.9, batch_size=8, steps=80, seed=0, dynamics_kind="sde", also_plain=True, cost_target=None)
    # linear in its weights: the kernel never moves, so the answer is the static kernel's, path for path
    still = forecast(_linear(), x, y, lr=0.5, **kw)
    assert still.variant == "plain" and still.drift == 0.0 and still.reliable
    assert [r["drift"] for r in still.details["relinearized"]] == [None] * 7  # six checks, and the verdict's at the end
    assert [r["step"] for r in still.details["relinearized"]] == [1, 2, 6, 20, 40, 60, 80] and still.details["relinearized"][-1]["end_of_horizon"]
    np.testing.assert_allclose(still.loss, still.plain.loss, rtol=1e-9)
    # a tanh MLP at a large learning rate: its kernel moves, the forecast follows it and says how far
    moved = forecast(_mlp(), x, y, lr=0.5, **kw)
    assert moved.variant == "relinearized" and moved.drift > 0.1 and not moved.reliable
    # the kernel still moved at 25 %: the follow-on points (50 and 75 %) are checked too, with no budget to keep
    assert [r["step"] for r in moved.details["relinearized"]] == [1, 2, 6, 20, 40, 60]
    assert any(r["drift"] is not None and r["drift"] > 0.1 for r in moved.details["relinearized"])
    assert not np.allclose(moved.loss, moved.plain.loss) and moved.plain.variant == "plain"
    with pytest.raises(PrenetError, match="unknown correction"):
        forecast(_mlp(), x, y, lr=0.1, batch_size=8, steps=5, correction="sometimes")
    for bad, says in (({"lr": 0.0}, "lr=0.0: give a learning rate > 0"), ({"momentum": 1.0}, "momentum=1.0: give 0 ≤ momentum < 1")):
        with pytest.raises(PrenetError, match=f"^forecast\\({says}\\)$"):
            forecast(_mlp(), x, y, **{"lr": 0.1, "batch_size": 8, "steps": 5, **bad})


def test_once_the_kernel_moves_each_later_check_computes_the_whole_kernel_only(digits_small, monkeypatch):
    """The drift check measures the kernel on ``DRIFT_SAMPLES`` samples first, so a kernel that stays costs little; once
    a check has re-linearized, the next goes straight to the whole kernel (it moved: the sample kernel would be thrown
    away), and its drift on the sample is read off the whole kernel's block."""
    from prenet.convergence import forecaster
    from prenet.convergence.ntk import outputs

    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = outputs(model, x).double().numpy()
    sizes = []
    real = forecaster.empirical_ntk
    monkeypatch.setattr(forecaster, "empirical_ntk", lambda m, xs, **k: sizes.append(len(xs)) or real(m, xs, **k))
    kw = dict(loss="cross_entropy", lr=0.5, momentum=0.9, batch_size=8, steps=80, n_full=48, seed=0, sde_paths=4, lam_max=None)
    kw |= dict(at=(0.025, 0.08, 0.25), follow_on=(), drift_threshold=0.0, method="exact", proj_dim=10, max_bytes=2**30)
    records = forecaster.trajectory("exact", model, x, y.numpy(), theta, F0, **kw)[3]
    s = forecaster.DRIFT_SAMPLES
    assert sizes == [s, len(x), len(x), len(x)]  # one sample kernel, then whole kernels
    assert all(r["drift"] > 0 and r["drift_sample"] > 0 for r in records)
    # the rule is the sample's drift either way (here scripted): read off a whole kernel's block, it can stay below the
    # threshold; that kernel is not adopted, and the next point measures a sample kernel again
    sizes.clear()
    scripted = iter([0.5, 0.6, 0.05, 0.05])  # point 1: sample drift, whole drift; point 2: block drift; point 3: sample
    monkeypatch.setattr(forecaster, "relative_error", lambda a, b: next(scripted))
    records = forecaster.trajectory("exact", model, x, y.numpy(), theta, F0, **(kw | {"drift_threshold": 0.1}))[3]
    assert sizes == [s, len(x), len(x), s] and [r["drift"] for r in records] == [0.6, None, None]
    assert [r["whole_kernel"] for r in records] == [True, True, False]  # the second computed, not adopted
    assert [r["drift_sample"] for r in records] == [0.5, 0.05, 0.05]
    monkeypatch.setattr(forecaster, "relative_error", relative_error)
    sizes.clear()  # a threshold no drift reaches: sample kernels only, none adopted
    kw["drift_threshold"] = 1e9
    records = forecaster.trajectory("exact", model, x, y.numpy(), theta, F0, **kw)[3]
    assert sizes == [s] * 4 and [r["drift"] for r in records] == [None] * 4  # ... and one more at the horizon's end
    assert [r.get("end_of_horizon", False) for r in records] == [False, False, False, True]


def test_a_forecast_dearer_than_its_fine_tune_says_so(digits_small, monkeypatch):
    """A new user's forecast of a 0.2 s fine-tune took 0.6-0.8 s and only details["cost"] said so: the API warns (the
    CLI, the planner and the stages, which report the cost themselves, turn it off)."""
    import warnings

    from prenet.convergence import forecaster

    x, y = digits_small
    monkeypatch.setattr(forecaster, "training_seconds", lambda *a, **k: (1e-6, 1e-4))  # a fine-tune of 0.1 ms: any forecast is dearer
    kw = dict(loss="cross_entropy", lr=0.1, batch_size=8, steps=20, seed=0, progress=False)
    with pytest.warns(forecaster.DearerWarning, match=r"x the 0.00 s the fine-tune itself would take here \(20 steps; target 30x cheaper\)"):
        fc = forecaster.forecast(_mlp(), x, y, **kw)
    assert fc.details["cost"]["met"] is False and fc.details["cost"]["ratio_estimate"] < 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", forecaster.DearerWarning)
        forecaster.forecast(_mlp(), x, y, warn_dearer=False, **kw)


def test_a_kernel_that_moves_only_after_the_last_check_makes_the_forecast_unreliable(digits_small, monkeypatch):
    """The checks sit at 1-25 % of the steps (where fine-tuning moves the kernel most), then at 50 and 75 %; where none
    found it moving, one more sample kernel at the horizon's end decides the verdict: a new user's MLP trained from scratch
    (1,000 digits, 300 steps) was called reliable at drift 0.09 by step 75 while its kernel had moved 0.7 by step 300
    and the forecast was 24 % off."""
    from prenet.convergence import forecaster

    x, y = digits_small
    drifts = iter([0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.5])  # the six checks stay under 0.1; the kernel moved by the end
    monkeypatch.setattr(forecaster, "relative_error", lambda a, b: next(drifts))
    kw = dict(loss="cross_entropy", momentum=0.0, batch_size=8, steps=80, seed=0, dynamics_kind="sde", cost_target=None)
    fc = forecaster.forecast(_mlp(), x, y, lr=0.1, **kw)
    rec = fc.details["relinearized"]
    assert [r["step"] for r in rec] == [1, 2, 6, 20, 40, 60, 80] and [r["drift"] for r in rec] == [None] * 7
    assert fc.variant == "plain" and fc.drift == 0.5 and fc.reliable is False


def test_a_kernel_past_the_stability_edge_is_capped_there_and_the_weights_follow_the_capped_outputs():
    """Eigenvalues above the linearized heavy-ball map's edge (h · η λ / n < 2 (1 + m)) are lowered to it, the rest kept;
    where none pass it the kernel is returned as is. On the capped kernel that map stays bounded where the measured one
    oscillates without limit, and the coefficients that move the weights reproduce the capped outputs' move."""
    rng = np.random.default_rng(0)
    n, c, lr, m = 40, 3, 0.05, 0.9
    V = np.linalg.qr(rng.normal(size=(n * c, n * c)))[0]
    assert dynamics.stability_edge(n, lr=lr, momentum=m, kind="mse") == pytest.approx(2 * 1.9 * n / lr)
    edge = dynamics.EDGE_MARGIN * dynamics.stability_edge(n, lr=lr, momentum=m, kind="mse")  # where a capped one goes
    lam = np.concatenate([[5 * edge, 2 * edge, 1.2 * edge], rng.uniform(0.01, 0.9, n * c - 3) * edge])
    theta = (V * lam) @ V.T
    capped, cap = dynamics.cap_at_edge(theta, n, lr=lr, momentum=m, kind="mse")
    assert len(cap.shrink) == 3 and cap.edge == pytest.approx(edge)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(capped)), np.sort(np.minimum(lam, edge)), rtol=1e-8, atol=1e-6 * edge)
    D = rng.normal(size=n * c)
    np.testing.assert_allclose(theta @ cap.weight_coefficients(D), capped @ D, rtol=1e-8, atol=1e-8 * np.abs(capped @ D).max())
    below = (V * np.minimum(lam, 0.99 * edge)) @ V.T
    same, none = dynamics.cap_at_edge(below, n, lr=lr, momentum=m, kind="mse")
    assert none is None and same is below

    def heavy_ball(K: np.ndarray) -> float:  # MSE on the outputs: the linearized map, full batch
        F0 = F = rng.normal(size=n * c)
        u = np.zeros(n * c)
        for _ in range(60):
            u = m * u + K @ F / n
            F = F - lr * u
        return float(np.abs(F).max() / np.abs(F0).max())  # growth of the largest output

    assert heavy_ball(theta) > 1e6 and heavy_ball(capped) < 2


def test_a_relinearized_kernel_past_the_stability_edge_is_capped_and_says_so(digits_small, monkeypatch):
    """Where the kernel measured along the trajectory has grown past the stability edge (as a network's kernel grows
    early in fine-tuning at a large learning rate), the dynamics run on it capped there, its record says how, and the
    forecast stays bounded."""
    from prenet.convergence import forecaster
    from prenet.convergence.ntk import outputs

    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = outputs(model, x).double().numpy()
    real = forecaster.empirical_ntk

    def grown(m, xs, **k):  # the kernel measured at a re-linearization: 200 times the first one
        out = real(m, xs, **k)
        return dataclasses.replace(out, theta=200 * out.theta)

    monkeypatch.setattr(forecaster, "empirical_ntk", grown)
    lr, momentum = 0.5, 0.9
    kw = dict(loss="cross_entropy", lr=lr, momentum=momentum, batch_size=8, steps=80, n_full=48, seed=0, sde_paths=4, lam_max=None)
    kw |= dict(at=(0.1, 0.3), follow_on=(), drift_threshold=0.1, method="exact", proj_dim=10, max_bytes=2**30)
    L, _, last, records, _ = forecaster.trajectory("sde", model, x, y.numpy(), theta, F0, **kw)
    assert len(records) == 2  # the second re-linearizes from weights (and a velocity) moved under a capped kernel
    edge = dynamics.EDGE_MARGIN * dynamics.stability_edge(1, lr=lr, momentum=momentum, kind="cross_entropy")
    for rec in records:
        assert rec["drift"] > 0.1 and rec["capped"]["directions"] >= 1
        assert rec["capped"]["edge_over_n"] == pytest.approx(edge) and 0 < rec["capped"]["trace_share_removed"] < 1
    assert np.isfinite(L).all() and L.max() < 10 * L[0]
    assert dynamics.top_eigenvalue(lambda v: last @ v, last.shape[0]) > rec["capped"]["edge_over_n"] * len(x)  # the kernel as measured


def test_lanczos_starts_from_a_seeded_vector_so_a_forecast_is_the_same_in_every_run():
    """ARPACK draws its own starting vector when given none; the top eigenvalue and the capped directions (and so the
    dynamics after a capped re-linearization) must not depend on it."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(300, 120))
    theta = A @ A.T
    first, second = (dynamics.top_eigenvalue(lambda v: theta @ v, 300) for _ in range(2))
    assert first == second
    a, b = (dynamics.cap_at_edge(theta, 100, lr=2.0 * 1.9 * 100 / (0.5 * first) * 3, momentum=0.9, kind="cross_entropy")[0] for _ in range(2))
    np.testing.assert_array_equal(a, b)


def test_the_sde_draws_the_same_noise_whether_a_block_holds_one_step_or_many(monkeypatch):
    """The noise is drawn a block of steps at a time; the stream, and so every path, is the same for any block size."""
    rng = np.random.default_rng(0)
    n, c = 24, 3
    A = rng.normal(size=(n * c, 40))
    theta, y, F0 = A @ A.T, rng.integers(0, c, n), rng.normal(size=(n, c))

    def run(momentum: float) -> tuple:
        state = dynamics.SDEState.start(F0, 3)
        kw = dict(kind="cross_entropy", lr=0.05, momentum=momentum, batch_size=4, steps=17, n_full=500, rng=np.random.default_rng(1))
        L, _, D = dynamics.sde_segment(theta, state, y, **kw)
        return L, D, state.F

    for m in (0.0, 0.9):
        many = run(m)
        monkeypatch.setattr(dynamics, "NOISE_BLOCK_VALUES", 1)  # one step a block
        one = run(m)
        monkeypatch.undo()
        for a, b in zip(many, one):
            np.testing.assert_array_equal(a, b)


def test_loss_values_and_gradients_from_one_softmax_match_their_separate_definitions():
    F = np.random.default_rng(0).normal(size=(3, 7, 4)) * 5
    y = np.random.default_rng(1).integers(0, 4, 7)
    Y = losses.onehot(y, 4)
    for kind in ("mse", "cross_entropy"):
        L, G = losses.values_and_grads(F, Y[None], kind)
        np.testing.assert_allclose(G, np.stack([losses.grad(f, Y, kind) for f in F]), rtol=1e-12)
        torch_L = [float(losses.torch_loss(torch.as_tensor(f), torch.as_tensor(y), kind)) for f in F]
        np.testing.assert_allclose(L, torch_L, rtol=1e-9)


def test_relinearizing_keeps_to_the_cost_budget_only_where_the_budget_can_hold(digits_small):
    """A kernel is skipped where the budget holds without it and not with it; where the target is out of reach anyway
    the more accurate forecast is made. The answer states the cost it measured."""
    import time

    from prenet.convergence.forecaster import Budget, trajectory
    from prenet.convergence.ntk import outputs

    x, y = digits_small
    model = _mlp()
    theta = empirical_ntk(model, x, method="exact").theta
    F0 = outputs(model, x).double().numpy()
    kw = dict(loss="cross_entropy", lr=0.5, momentum=0.9, batch_size=8, steps=80, n_full=48, seed=0, sde_paths=4, lam_max=None)
    kw |= dict(at=(0.025, 0.08, 0.25), follow_on=(), drift_threshold=0.0, method="exact", proj_dim=10, max_bytes=2**30)
    roomy = trajectory("exact", model, x, y.numpy(), theta, F0, **kw, budget=Budget(1e6, time.perf_counter()), kernel_seconds=0.01)[3]
    assert all("skipped" not in r and r["drift"] is not None for r in roomy)
    tight = trajectory("exact", model, x, y.numpy(), theta, F0, **kw, budget=Budget(1e3, time.perf_counter()), kernel_seconds=1e6)[3]
    assert [r.get("skipped") for r in tight] == ["cost budget"] * 3
    lost = trajectory("exact", model, x, y.numpy(), theta, F0, **kw, budget=Budget(0.0, time.perf_counter()), kernel_seconds=1e6)[3]
    assert all("skipped" not in r for r in lost)
    # ... but never past the fine-tune's own time: a forecast dearer than the training it predicts is skipped
    dear = trajectory("exact", model, x, y.numpy(), theta, F0, **kw, kernel_seconds=1e6, ceiling=Budget(1e3, time.perf_counter()))[3]
    assert [r.get("skipped") for r in dear] == ["dearer than the fine-tune"] * 3
    cheap = trajectory("exact", model, x, y.numpy(), theta, F0, **kw, kernel_seconds=0.01, ceiling=Budget(1e6, time.perf_counter()))[3]
    assert all("skipped" not in r for r in cheap)
    fc = forecast(model, x, y, loss="cross_entropy", lr=0.5, momentum=0.9, batch_size=8, steps=80)
    cost = fc.details["cost"]
    assert (
        cost["target"] == 30 and cost["train_step_seconds"] > 0 and cost["train_seconds_estimate"] == pytest.approx(80 * cost["train_step_seconds"])
    )
    assert cost["ratio_estimate"] == pytest.approx(cost["train_seconds_estimate"] / fc.seconds) and cost["met"] == (cost["ratio_estimate"] >= 30)
    assert "cost" not in forecast(model, x, y, loss="cross_entropy", lr=0.5, batch_size=8, steps=20, cost_target=None).details


def test_batch_schedule_is_epochs_of_permutations():
    b = dynamics.batch_schedule(10, 4, 5, seed=0)
    assert [len(i) for i in b] == [4] * 5
    assert sorted(np.concatenate(b[:2]).tolist()) == sorted(set(np.concatenate(b[:2]).tolist()))


def test_loss_is_logged_where_asked_finely_at_the_start(digits_small):
    """A geometric grid resolves the first steps (where a q·L0 target is often crossed) and ends at the last step; the
    real fine-tune logs exactly there, with the same curve as logging every step."""
    g = log_grid(1000, 30)
    assert g[0] == 1 and g[-1] == 1000 and list(g[:5]) == [1, 2, 3, 4, 5] and np.all(np.diff(g) > 0) and len(g) <= 31
    x, y = digits_small
    kw = dict(loss="cross_entropy", lr=0.05, momentum=0.9, batch_size=16, steps=40, seed=0)
    sparse = finetune(_mlp(), x, y, log_steps=log_grid(40, 8), **kw)
    every = finetune(_mlp(), x, y, **kw)
    assert sparse.logged_steps.tolist() == [0, *log_grid(40, 8).tolist()]
    np.testing.assert_allclose(sparse.loss, every.loss[sparse.logged_steps], rtol=1e-6)


def test_image_batches_are_logged_through_a_channels_last_copy_that_follows_the_training(digits_small):
    """The logging view of a CNN on images is a channels_last copy (the trained model keeps its layout); the curve it
    logs is the trained model's own, to float rounding. An MLP is logged as it is."""
    from prenet.convergence.nets import build

    images, y = digits_small
    torch.manual_seed(0)
    cnn = build("cnn", image_size=8, classes=10, widths=[4, 8])
    view, vx = logging_view(cnn, images)
    assert view is not cnn and vx.is_contiguous(memory_format=torch.channels_last)
    assert next(cnn.parameters()).is_contiguous()
    kw = dict(loss="cross_entropy", lr=0.05, momentum=0.9, batch_size=16, steps=5, seed=0)
    real = finetune(cnn, images, y, **kw)
    with torch.no_grad():
        F = cnn(images).double().numpy()
    assert real.loss[-1] == pytest.approx(losses.value(F, losses.onehot(y.numpy(), F.shape[1]), "cross_entropy"), rel=1e-6)
    mlp = _mlp()
    same, sx = logging_view(mlp, images)
    assert same is mlp and sx is images


# --- targets and baselines ---------------------------------------------------------------------------------


def test_target_definitions():
    L = np.array([1.0, 0.6, 0.3, 0.2, 0.15, 0.1])
    assert targets.steps_to_converge(L, 0.1) == 4  # |L_t - 0.1| <= 0.09
    assert targets.steps_to_loss(L, 0.25) == 3
    assert targets.steps_to_loss(L, 0.01) is None
    assert targets.steps_to_accuracy(np.array([0.1, 0.5, 0.95]), 0.9) == 2
    assert targets.steps_to_converge(np.array([1.0, 1.2, 1.5]), 0.1) is None  # no progress
    assert targets.steps_to_converge(np.array([1.0, np.inf, np.inf]), 0.1) is None


def test_curve_fit_recovers_an_exponential():
    t = np.arange(201)
    L = 0.2 + 1.5 * np.exp(-t / 40)
    pred = curve_fit_forecast(L, 200, 0.15)
    assert np.allclose(pred, L, rtol=1e-3)


# --- the forecast API ----------------------------------------------------------------------------------------


def test_forecast_api_contract(digits_small):
    x, y = digits_small
    model = _mlp()
    before = [p.detach().clone() for p in model.parameters()]
    fc = forecast(model, x, y, loss="cross_entropy", lr=0.05, momentum=0.9, batch_size=16, steps=80, seed=0, also_ode=True)
    assert fc.ode is not None and fc.ode.dynamics == "ode" and len(fc.ode.loss) == 81 and 0 < fc.ode.seconds
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "forecast must not modify the model"
    assert len(fc.loss) == 81 and len(fc.accuracy) == 81 and fc.seconds > 0
    assert fc.steps_to_loss(1e-12) is None  # 0 itself is refused: test_targets_are_checked_before_any_work
    assert fc.steps_to_loss(float(fc.loss[0])) == 0
    # the default follows the kernel along the forecast's own trajectory (no training): drift and re-linearizations stated
    # (the four base points, then the follow-on ones where the kernel still moved at the fourth; a fine-tune this short,
    # whose 30x budget is under CEILING_FLOOR_S, is also checked at 15 %: SHORT_FOLLOW_ON_AT)
    steps = [r["step"] for r in fc.details["relinearized"]]
    base = [s for s in steps if s in (1, 2, 6, 20)]
    assert fc.corrected is None and fc.probe_steps == 0 and base == [1, 2, 6, 20] and set(steps) - set(base) <= {12, 40, 60} and 12 in steps
    # a check skipped for cost measures nothing: the drift is unknown then, not 0, and reliability unknown too
    unchecked = all(r.get("skipped") for r in fc.details["relinearized"])
    assert (fc.drift is None and fc.reliable is None) if unchecked else (fc.drift is not None and fc.reliable is not None)
    assert fc.dynamics == "exact" and fc.n_used == 48  # all samples, N·C = 144: the exact linearized SGD
    from prenet.convergence.forecaster import auto_dynamics

    assert [auto_dynamics(256, 256, 10, 256), auto_dynamics(256, 256, 5, 32), auto_dynamics(256, 128, 5, 32), auto_dynamics(1000, 1000, 10, 32)] == [
        "ode",
        "exact",
        "sde",
        "sde",
    ]


def test_forecast_predicts_real_fine_tuning_of_a_small_net(digits_small):
    """On a small MLP at a modest learning rate the linearization holds: predicted steps within 25 %."""
    x, y = digits_small
    model = _mlp()
    real = finetune(copy.deepcopy(model), x, y, loss="cross_entropy", lr=0.05, momentum=0.0, batch_size=48, steps=150, seed=0)
    L_real, _ = dense_curve(real, 150)
    fc = forecast(model, x, y, loss="cross_entropy", lr=0.05, momentum=0.0, batch_size=48, steps=150, probe_fraction=0)
    r, p = targets.steps_to_converge(L_real, 0.1), fc.steps_to_converge(0.1)
    assert r is not None and p is not None and abs(p - r) / r < 0.25


def test_forecast_rejects_bad_labels(digits_small):
    x, y = digits_small
    with pytest.raises(PrenetError, match="integer class labels"):
        forecast(_mlp(), x, y.float(), lr=0.1, batch_size=8, steps=5)
    with pytest.raises(PrenetError, match="model has 2 outputs"):
        forecast(_mlp(classes=2), x, y, lr=0.1, batch_size=8, steps=5, probe_fraction=0)


# --- the stages (tiny run shared with test_pipeline) ---------------------------------------------------------


def test_convergence_stages_write_validated_outputs(tiny_run):
    root, cfg, results = tiny_run
    runs = pl.read_parquet(cfg.paths.finetune_runs)
    assert runs.height == results["finetune"]["runs"] and set(runs["split"]) <= {"train", "val", "holdout"}
    m = json.loads((Path(cfg.paths.plots) / "convergence.json").read_text())
    assert m["primary_target"] == "relative_eps=0.1" and m["configs"] == runs.height
    assert {"cost", "gaps", "drift_flag", "by_task_lr"} <= set(m)
    for f in ("convergence_curves.png", "convergence_steps.png"):
        assert (Path(cfg.paths.plots) / f).stat().st_size > 1000
    assert (Path(cfg.paths.pretrained) / "cnn_digits_split.pt").exists()
    sd = torch.load(Path(cfg.paths.pretrained) / "cnn_digits_split.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in sd.values())


def test_convergence_split_is_keyed_by_setting_with_seeds_together(tiny_run):
    from pipeline.split import convergence_split_rule
    from prenet.convergence.sweep import RunConfig
    from prenet.data.split_rule import assign

    _, cfg, _ = tiny_run
    rule = convergence_split_rule(cfg)
    runs = pl.read_parquet(cfg.paths.finetune_runs)
    for r in runs.iter_rows(named=True):
        c = RunConfig(r["task"], r["loss"], r["lr"], r["momentum"], r["batch_size"], r["seed"], r["steps"])
        assert c.config_id == r["config_id"] and c.group_id == r["group_id"] and assign(c.group_id, rule) == r["split"]
    other_seed = RunConfig("t", "mse", 0.1, 0.9, 32, 0, 200), RunConfig("t", "mse", 0.1, 0.9, 32, 1, 200)
    assert other_seed[0].config_id != other_seed[1].config_id and other_seed[0].group_id == other_seed[1].group_id


def test_seed_noise_floor_is_the_spread_across_seeds_of_one_configuration():
    import polars as pl

    from prenet.convergence.evaluation import seed_noise_floor

    rows = [{"task": "t", "lr": 0.1, "seed": s, "target_kind": "relative_eps", "target_param": 0.1, "real_steps": v} for s, v in ((0, 90), (1, 110))]
    rows += [
        {"task": "u", "lr": 0.1, "seed": s, "target_kind": "relative_eps", "target_param": 0.1, "real_steps": v} for s, v in ((0, 100), (1, None))
    ]  # one seed did not reach it: no spread
    out = seed_noise_floor(pl.DataFrame(rows), ["task", "lr"])
    assert out == {("relative_eps", 0.1): {"median_seed_spread_pct": pytest.approx(20.0), "configs": 1}}
    assert seed_noise_floor(pl.DataFrame(rows).filter(pl.col("seed") == 0), ["task", "lr"]) == {}


def test_the_default_forecast_answers_a_problem_too_large_for_all_samples_on_a_subset_it_states():
    """issue 30: with ``subset`` None a fine-tuning set whose Θ would not fit is answered on the most samples that fit
    (stated in ``details``), not refused; only when not even 2·C samples fit is it refused, in one line."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 10))
    x, y = torch.randn(600, 8), torch.randint(0, 10, (600,))
    fc = forecast(model, x, y, lr=0.05, batch_size=32, steps=20, probe_fraction=0.0, progress=False, max_bytes=2 * 2**20)
    assert 20 <= fc.n_used < 600 and fc.n_samples == 600 and "subset of" in fc.details["subset_chosen"]
    assert np.isfinite(fc.loss).all() and len(fc.loss) == 21
    small = forecast(model, x[:40], y[:40], lr=0.05, batch_size=32, steps=5, probe_fraction=0.0, progress=False, max_bytes=2 * 2**20)
    assert small.n_used == 40 and small.details["subset_chosen"].startswith("all 40 samples")
    with pytest.raises(ProblemTooLargeError, match="raise max_bytes"):
        forecast(model, x, y, lr=0.05, batch_size=32, steps=5, probe_fraction=0.0, progress=False, max_bytes=20_000)


def test_the_default_subset_grows_with_the_cost_budget_and_never_below_its_floor():
    """issue 30 item 2: a fine-tune long enough to pay for it gets the largest subset whose predicted cost fits 1/30
    of it; a short one keeps the floor (128) and says no size fits."""
    import time

    from prenet.convergence.forecaster import SUBSET_SIZES, Budget, choose_subset

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 10))
    x = torch.randn(3000, 8)
    kw = dict(steps=100, paths=8, proj_dim=100, max_bytes=2**30, seed=0)
    n, why = choose_subset(model, x, 3000, 10, budget=Budget(1e6, time.perf_counter()), **kw)
    assert n == SUBSET_SIZES[0] and "fits the budget" in why
    n, why = choose_subset(model, x, 3000, 10, budget=Budget(0.0, time.perf_counter()), **kw)
    assert n == SUBSET_SIZES[-1] == 128 and "the floor" in why
    assert choose_subset(model, x, 150, 10, budget=None, **kw) == (None, "all 150 samples (N·C = 1500 ≤ 2048: the exact linearized SGD)")
    # a fine-tune so short that its 30x budget is under CEILING_FLOOR_S is sized to that floor (a poor-transfer pair's
    # 128-sample answers were 30 % late on one subset draw of three), and the answer says so
    fc = forecast(model, x[:300], torch.randint(0, 10, (300,)), lr=0.05, batch_size=32, steps=20, probe_fraction=0.0, progress=False)
    assert fc.n_used == 256 and "fits the budget (5.0 s)" in fc.details["subset_chosen"]
    assert "budget" in fc.details["subset_chosen"] and "under the 5 s floor a fine-tune this short is sized to" in fc.details["subset_chosen"]


def test_a_cross_entropy_lr_whose_forecast_loss_explodes_is_called_divergent_with_the_bound():
    """issue 30: cross-entropy is not refused at its curvature bound (it may still train), but a forecast whose loss
    multiplies is divergent: one line with the bound."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(40, 8), torch.randint(0, 3, (40,))
    with pytest.raises(
        dynamics.DivergenceError, match=r"lr 1e\+06: the linearized fine-tuning diverges .*stability bound .*lr < .*cannot forecast this lr"
    ) as e:
        forecast(model, x, y, lr=1e6, batch_size=8, steps=20, probe_fraction=0.0, progress=False)
    assert "\n" not in str(e.value)  # one line
    ok = forecast(model, x, y, lr=0.05, batch_size=8, steps=20, probe_fraction=0.0, progress=False)
    assert ok.loss[-1] < ok.loss[0]


def test_a_diverged_forecast_is_not_re_linearized(monkeypatch):
    """A curve that has diverged is said so at once: its kernel is not followed (at lr 1e6 an eigen-search on the grown
    kernel took 12 s of a 17 s answer), while a stable lr still re-linearizes."""
    from prenet.convergence import forecaster as fmod

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(40, 8), torch.randint(0, 3, (40,))
    moved = []
    real_moved_copy = fmod._moved_copy
    monkeypatch.setattr(fmod, "_moved_copy", lambda *a: moved.append(1) or real_moved_copy(*a))
    with pytest.raises(dynamics.DivergenceError):
        forecast(model, x, y, lr=1e6, batch_size=8, steps=200, progress=False)
    assert moved == []
    forecast(model, x, y, lr=0.05, batch_size=8, steps=200, progress=False)
    assert moved
    assert fmod.ce_diverged(np.array([2.0, 30.0]), 2.0, 3) and not fmod.ce_diverged(np.array([0.01, 1.0]), 0.01, 3)


def test_auto_chooses_the_class_averaged_kernel_only_where_it_drops_little_of_theta(digits_small):
    """issue 30: ``auto`` measures the part of Θ that K ⊗ I_C leaves out, exactly on a few samples. A linear model's
    kernel is (x·x' + 1) ⊗ I_C (nothing dropped: ``kron``); a small random MLP's cross-class blocks are a large share (the
    full kernel). The forecast states the choice."""
    from prenet.convergence.ntk import KRON_MAX_DROPPED, choose_estimator, kron_dropped_share

    x, y = digits_small
    K = np.array([[2.0, 0.5], [0.5, 1.0]])
    assert kron_dropped_share(np.kron(K, np.eye(3)), 3) == pytest.approx(0.0, abs=1e-12)
    off = np.kron(K, np.eye(3)) + np.kron(np.eye(2), np.ones((3, 3)) - np.eye(3))  # cross-class blocks added
    assert kron_dropped_share(off, 3) == pytest.approx(relative_error(np.kron(K, np.eye(3)), off))
    method, why = choose_estimator(_linear(), x, proj_dim=100, max_bytes=2**30)
    assert method == "kron" and "it drops is 0.0%" in why
    method, why = choose_estimator(_mlp(), x, proj_dim=100, max_bytes=2**30)
    share = kron_dropped_share(empirical_ntk(_mlp(), x[:16], method="exact").theta, 3)
    assert share > KRON_MAX_DROPPED and method == "auto" and "the full kernel" in why
    fc = forecast(_linear(), x, y, lr=0.05, batch_size=8, steps=10, probe_fraction=0.0, progress=False, cost_target=None)
    assert fc.ntk_method == "kron" and "class-averaged" in fc.details["ntk_chosen"]
    assert forecast(_linear(), x, y, lr=0.05, batch_size=8, steps=10, ntk="exact", progress=False, cost_target=None).ntk_method == "exact"


def test_class_averaged_kernel_is_the_class_average_of_the_exact_kernel_times_identity(digits_small):
    """``kron``: K ⊗ I_C with K within a few % of the exact Θ's class-averaged diagonal blocks (Rademacher probes of
    the logits: unbiased, cross-class terms cancel in expectation), at N²·P Gram cost per probe."""
    from prenet.convergence.ntk import class_averaged_ntk

    x, _ = digits_small
    model = _mlp()
    exact = empirical_ntk(model, x[:12], method="exact").theta
    c = exact.shape[0] // 12
    K = np.mean([exact[i::c, i::c] for i in range(c)], axis=0)
    approx = empirical_ntk(model, x[:12], method="kron").theta
    assert approx.shape == exact.shape and np.allclose(approx, np.kron(approx[::c, ::c], np.eye(c)))
    many = class_averaged_ntk(model, x[:12], probes=64)
    assert relative_error(many[::c, ::c], K) < relative_error(approx[::c, ::c], K) + 0.05 and relative_error(many[::c, ::c], K) < 0.1


def test_layer_jacobian_equals_vmap_jacrev_on_every_covered_layer():
    """The batched per-layer Jacobian (one forward, one backward per output) is the matrix ``vmap(jacrev)`` gives, column
    for column, and the per-layer Gram (Linear layers factored, never forming J) is its J Jᵀ, on an MLP, a CNN (strided, dilated and padded convolutions), a batch-norm CNN in eval mode and a linear
    layer over a sequence; and for a logit combination v·f. A layer it does not cover sends the NTK to ``vmap``."""
    from prenet.convergence import per_sample
    from prenet.convergence.nets import build

    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Flatten(), nn.Linear(20, 3))  # Linear over 4 positions
    odd = nn.Sequential(
        nn.Conv2d(1, 4, 3, stride=2, padding=2, dilation=2), nn.ReLU(), nn.Conv2d(4, 3, 2, bias=False), nn.Flatten(), nn.LazyLinear(2)
    )
    cases = [
        (build("mlp", image_size=8, classes=3, widths=[16]), torch.randn(10, 1, 8, 8)),
        (build("cnn_bn", image_size=12, classes=4, widths=[4, 6]), torch.randn(10, 1, 12, 12)),
        (odd, torch.randn(10, 1, 12, 12)),
        (seq, torch.randn(10, 4, 6)),
    ]
    for model, x in cases:
        model(x)  # materialize lazy layers; batch-norm running statistics move off their init
        model.eval()
        assert per_sample.covers(model)
        ref = jacobian(model, x, chunk=4, by_layer=False)
        assert torch.allclose(jacobian(model, x), ref, atol=1e-5, rtol=1e-4)
        v = torch.tensor([1.0, -1.0] + [1.0] * (ref.shape[0] // 10 - 2))
        assert torch.allclose(jacobian(model, x, logit_weights=v), jacobian(model, x, logit_weights=v, by_layer=False), atol=1e-5, rtol=1e-4)
        assert torch.allclose(per_sample.layer_gram(model, x, chunk=4), ref @ ref.T, atol=1e-4, rtol=1e-4)  # factored Linear layers too
        V = torch.stack([v, -v.roll(1)])  # two combinations: their Grams summed from one forward
        both = sum(r @ r.T for r in (jacobian(model, x, logit_weights=w, by_layer=False) for w in V))
        assert torch.allclose(per_sample.layer_gram(model, x, logit_weights=V, summed=True), both, atol=1e-4, rtol=1e-4)
    assert not per_sample.covers(nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3)).eval())

    class Twice(nn.Module):  # one Linear applied twice per forward: covered layers, but not the batched way
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(torch.tanh(self.lin(x)))

    twice, xt = Twice().eval(), torch.randn(6, 3)
    assert per_sample.covers(twice)
    with pytest.raises(per_sample.NotCovered, match="more than once"):
        jacobian(twice, xt, by_layer=True)
    ref = jacobian(twice, xt, by_layer=False)
    assert torch.allclose(jacobian(twice, xt), ref) and np.allclose(
        empirical_ntk(twice, xt, method="exact").theta, (ref @ ref.T).double().numpy(), atol=1e-5
    )
    assert empirical_ntk(twice, xt, method="kron").theta.shape == (18, 18)
    assert not per_sample.covers(build("mlp", image_size=8, classes=3).train())


def test_the_kernel_is_followed_past_the_base_points_where_the_budget_allows(digits_small):
    """issue 30 (poor transfer): ``FOLLOW_ON_AT`` points come after ``RELINEARIZE_AT``, checked as those are (a sample
    kernel, a whole one where it moved), within ``follow_budget``; one the budget leaves out is recorded as skipped."""
    import time

    from prenet.convergence.forecaster import FOLLOW_ON_AT, RELINEARIZE_AT, Budget, trajectory
    from prenet.convergence.ntk import outputs

    x, y = digits_small
    y = np.asarray(y)
    assert min(FOLLOW_ON_AT) > max(RELINEARIZE_AT)
    kw = dict(loss="cross_entropy", lr=0.5, momentum=0.9, batch_size=8, steps=80, n_full=len(y), seed=0, sde_paths=2, lam_max=None)
    kw |= dict(at=RELINEARIZE_AT, drift_threshold=0.1, method="exact", proj_dim=10, max_bytes=2**30)
    for model, moves in ((_mlp(), True), (_linear(), False)):
        theta, F0 = empirical_ntk(model, x, method="exact").theta, outputs(model, x).double().numpy()
        free = trajectory("sde", model, x, y, theta, F0, **kw)[3]
        spent = trajectory("sde", model, x, y, theta, F0, **kw, follow_budget=Budget(0.0, time.perf_counter()))[3]
        if not moves:  # linear in its weights, the kernel never moves: checked at 40 and 60 too, then the horizon's end
            assert [r["step"] for r in free] == [1, 2, 6, 20, 40, 60, 80] and all(r["drift"] is None for r in free)
            # with no budget for them, the verdict's check at the horizon's end still runs (a sample kernel)
            assert [(r["step"], r.get("skipped")) for r in spent[4:]] == [(40, "cost budget"), (60, "cost budget"), (80, None)]
            assert spent[-1]["end_of_horizon"] and spent[-1]["drift_sample"] is not None
        else:  # moving at 25 %: followed at 50 and 75 %, or recorded as skipped for cost with no budget left
            assert [r["step"] for r in free] == [1, 2, 6, 20, 40, 60] and free[-1]["drift"] is not None
            assert [(r["step"], r.get("skipped")) for r in spent[-2:]] == [(40, "cost budget"), (60, "cost budget")]
            assert [r["step"] for r in spent[:4]] == [1, 2, 6, 20]


def test_a_subset_forecast_moves_by_half_its_measured_generalization_gap(monkeypatch):
    """issue 30: a subset's own loss is optimistic (its samples are the ones fitted), the same network's loss on samples
    outside it pessimistic. ``trajectory`` with ``heldout`` measures the gap at the linearized weights along the steps and
    answers their midpoint (the curve moved by half the gap); the dynamics themselves are the same as without it (checkpoints
    split the SDE's segments without changing its draws)."""
    from prenet.convergence.forecaster import trajectory
    from prenet.convergence.ntk import outputs

    d = datasets.load("digits").select([0, 1, 2], limit=300, seed=0)
    x, y = torch.as_tensor(d.x), np.asarray(d.y)
    model, sub = _mlp(), np.arange(0, 300, 6)  # 50 fitted samples, 250 held out
    xs, ys = x[sub], y[sub]
    theta, F0 = empirical_ntk(model, xs, method="exact").theta, outputs(model, xs).double().numpy()
    kw = dict(loss="cross_entropy", lr=0.03, momentum=0.0, batch_size=10, steps=120, n_full=300, seed=0, sde_paths=4, lam_max=None)
    kw |= dict(at=(0.25,), drift_threshold=1e9, method="exact", proj_dim=10, max_bytes=2**30)
    rest = np.setdiff1d(np.arange(300), sub)
    L0, A0, _, _, none = trajectory("sde", model, xs, ys, theta, F0, **kw)
    L1, A1, _, _, gaps = trajectory("sde", model, xs, ys, theta, F0, **kw, heldout=(x[rest], y[rest]))
    assert none == [] and [g["step"] for g in gaps] == [0, 1, 3, 10, 30, 120]  # RELINEARIZE_AT and the end
    assert all(g["used"] for g in gaps) and gaps[0]["off_linear"] == 0.0  # a small step: the network stays linear
    gap, gap_acc, at = ([g[k] for g in gaps] for k in ("loss_gap", "accuracy_gap", "step"))
    assert gap[-1] - gap[0] > 0.01  # the fitted samples' loss falls faster than the held-out ones'
    assert np.allclose(L1, L0 + 0.5 * np.interp(np.arange(121), at, gap), atol=1e-9)
    assert np.allclose(A1, np.clip(A0 + 0.5 * np.interp(np.arange(121), at, gap_acc), 0, 1), atol=1e-9)
    # 10x the lr: this small untrained tanh net leaves its linearization (its outputs 0.6-0.75 of their move away from the
    # linearized ones) by step 30; those gaps are recorded, not used, and the last usable one holds
    kw["lr"] = 0.3
    L0, _, _, _, _ = trajectory("sde", model, xs, ys, theta, F0, **kw)
    L1, _, _, _, gaps = trajectory("sde", model, xs, ys, theta, F0, **kw, heldout=(x[rest], y[rest]))
    assert [g["used"] for g in gaps] == [True, True, True, True, False, False] and gaps[-1]["off_linear"] > 0.5
    assert np.allclose(L1[30:], L0[30:] + 0.5 * gaps[3]["loss_gap"], atol=1e-9)
    # each gap judged on its own: a network back within the linearization later is used again, the curve interpolated
    # across the one that was off
    from prenet.convergence import forecaster

    offs = iter([0.0, 0.2, 0.2, 0.9, 0.3, 0.1])
    real_gap = forecaster._gap
    monkeypatch.setattr(forecaster, "_gap", lambda *a, **k: {**real_gap(*a, **k), "used": next(offs) <= forecaster.HELDOUT_MAX_OFF_LINEAR})
    L2, _, _, _, gaps = trajectory("sde", model, xs, ys, theta, F0, **kw, heldout=(x[rest], y[rest]))
    assert [g["used"] for g in gaps] == [True, True, True, False, True, True]
    ok = [g for g in gaps if g["used"]]
    assert np.allclose(L2, L0 + 0.5 * np.interp(np.arange(121), [g["step"] for g in ok], [g["loss_gap"] for g in ok]), atol=1e-9)


def test_a_curve_still_falling_at_the_horizon_is_said_so():
    from prenet.convergence.query import last_tenth_fall

    assert last_tenth_fall(np.array([2.0, 1.5, 1.2, 1.0])) == pytest.approx(0.2)  # the last step: 0.2 of the 1.0 fall
    assert last_tenth_fall(np.exp(-np.arange(201) / 10.0)) < 1e-3  # settled long before step 200
    assert last_tenth_fall(np.array([1.0, 1.0])) is None and last_tenth_fall(np.array([1.0])) is None


def test_the_header_says_when_the_batch_is_the_whole_set():
    from prenet.convergence.query import _batch_text

    assert _batch_text(32, 256) == "32"
    assert _batch_text(1000, 256).startswith("256 (all samples, full-batch: --batch-size 1000")


def test_a_step_error_counts_a_target_one_side_misses_as_100_percent():
    from prenet.convergence.evaluation import step_error_pct

    assert step_error_pct(110, 100) == pytest.approx(10.0) and step_error_pct(None, 100) == 100.0 == step_error_pct(5, None)
    assert step_error_pct(None, None) is None and step_error_pct(1, 0) == 100.0  # 0 real steps: measured against 1


def test_the_second_seed_runs_on_the_frozen_holdout_settings_only():
    """The default sweep (conf/convergence/quick.yaml): every holdout setting with both seeds (the noise floor), every
    development setting with seed 0; convergence=full runs every seed everywhere; a dev seed outside the seeds is refused."""
    from pipeline.config import compose
    from pipeline.finetune import convergence_configs
    from pipeline.pretrain import convergence_tasks
    from pipeline.split import convergence_split_rule
    from prenet.data.split_rule import assign

    cfg = compose([])
    configs = convergence_configs(cfg, convergence_tasks(cfg))
    rule = convergence_split_rule(cfg)
    hold = [c for c in configs if assign(c.group_id, rule) == "holdout"]
    dev = [c for c in configs if assign(c.group_id, rule) != "holdout"]
    assert len({c.group_id for c in configs}) == 48 and len(configs) == 60
    assert len(hold) == 24 and {c.seed for c in hold} == {0, 1} and {c.seed for c in dev} == {0}
    full = compose(["convergence=full"])
    assert {c.seed for c in convergence_configs(full, convergence_tasks(full))} == {0, 1}
    with pytest.raises(PrenetError, match=r"dev_seeds=\[2\] names seeds outside"):
        convergence_configs(compose(["convergence.sweep.dev_seeds=[2]"]), convergence_tasks(cfg))


def test_the_forecast_runs_numpy_at_torch_thread_count(digits_small, monkeypatch):
    """Its cost is weighed against the fine-tune's steps at torch's thread count: the dynamics' NumPy products run at
    that count too (OpenBLAS otherwise takes every core), and the caller's setting is back afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from prenet.convergence import forecaster

    def blas() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    x, y = digits_small
    seen = []
    real = forecaster.run_dynamics
    monkeypatch.setattr(forecaster, "run_dynamics", lambda *a, **k: seen.append(blas()) or real(*a, **k))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with threadpool_limits(limits=2, user_api="blas"):  # the caller's NumPy at two threads
            forecast(_mlp(), x, y, lr=0.05, batch_size=8, steps=5, correction="none", progress=False, cost_target=None)
            after = blas()
    finally:
        torch.set_num_threads(threads)
    assert seen and seen[0] and all(n == 1 for n in seen[0])
    assert after and all(n == 2 for n in after)
    # never more than the caller's own setting: torch at two threads, the caller's NumPy at one
    seen.clear()
    try:
        torch.set_num_threads(2)
        with threadpool_limits(limits=1, user_api="blas"):
            forecast(_mlp(), x, y, lr=0.05, batch_size=8, steps=5, correction="none", progress=False, cost_target=None)
    finally:
        torch.set_num_threads(threads)
    assert seen and all(n == 1 for n in seen[0])


def test_cost_check_forecasts_the_default_again_from_other_subset_draws(tmp_path):
    """Stage forecast_cost on a tiny full-data check (a digits CNN, 512 samples, two epochs at batch 32): with
    ``subset_seeds`` the default forecast is run again per seed, recorded per fine-tune (its samples, cost, errors)
    and summarised per draw; a seed equal to the run's, or given twice, is one error before any work."""
    from omegaconf import OmegaConf, open_dict

    from pipeline.config import compose
    from pipeline.forecast_cost import forecast_cost
    from tests.conftest import tiny_overrides

    base = compose(tiny_overrides(tmp_path))  # composed once: each compose costs ~1.5 s

    def cfg_with(seeds: list[int]):
        cfg = copy.deepcopy(base)
        with open_dict(cfg):
            cfg.convergence.cost_check = OmegaConf.create(
                {
                    "enabled": True,
                    "tasks": {
                        "cnn_digits_relabel": {
                            "dataset": "digits",
                            "arch": "cnn",
                            "widths": [8, 16],
                            "regime": "in",
                            "pretrain": {"epochs": 1, "lr": 0.003, "batch_size": 64, "limit": 256},
                            "finetune": {"relabel": "mod5", "n_train": 256},
                            "lrs": [0.02],
                        }
                    },
                    "runs": [{"loss": "cross_entropy", "lr": 0.02, "momentum": 0.0, "batch_size": 32, "epochs": 1}],
                    "variants": [{"name": "default", "subset": None, "correction": "trajectory"}],
                    "log_samples": 128,
                    "log_points": 10,
                    "subset_seeds": seeds,
                }
            )
        return cfg

    cfg = cfg_with([7])
    rec = forecast_cost(cfg)
    (entry,) = rec["tasks"].values()
    again = entry["variants"]["default"]["subset_seeds"]["7"]
    assert set(again) >= {"subset", "subset_chosen", "seconds", "cost_ratio", "median_abs_pct_error_q"} and again["seconds"] > 0
    assert list(rec["default_error_pct_by_subset_seed"]) == [str(cfg.seed), "7"]
    assert rec["default_error_pct_by_subset_seed"]["7"] == again["median_abs_pct_error_q"]
    for bad in ([int(cfg.seed)], [7, 7]):
        with pytest.raises(PrenetError, match="subset_seeds=.*give seeds other than seed="):
            forecast_cost(cfg_with(bad))
