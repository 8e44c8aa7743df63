"""The library behind `prenet predict convergence` and `prenet predict outcome` (the CLI only parses and prints)."""

from __future__ import annotations

import polars as pl
import pytest

from prenet.convergence.query import answer, fine_tune_settings, pick_task, render
from prenet.errors import PrenetError
from prenet.outcome.predict import predict_file, read_telemetry, render_outcome

TASKS = {
    "tiny_digits": {
        "dataset": "digits",
        "arch": "mlp",
        "widths": [16],
        "pretrain": {"epochs": 1},
        "finetune": {"classes": [0, 1, 2], "n_train": 48},
        "lrs": [0.05],
    }
}


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to train_outcome and pretrain (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("train_outcome", "pretrain")


def test_pick_task_and_settings_defaults():
    task = pick_task(TASKS, None, "x.yaml")  # the only task when none is named
    assert task.name == "tiny_digits"
    with pytest.raises(PrenetError, match="'other' is not defined in x.yaml; known tasks: tiny_digits"):
        pick_task(TASKS, "other", "x.yaml")
    with pytest.raises(PrenetError, match="is incomplete"):
        pick_task({"t": {"dataset": "digits"}}, "t", "x.yaml")
    opt = fine_tune_settings(task, {"batch_size": 8, "lr": None}, {"steps": 20, "lr": 0.3})
    assert opt == {"loss": "cross_entropy", "lr": 0.3, "momentum": 0.0, "batch_size": 8, "steps": 20}
    assert fine_tune_settings(task, {"batch_size": 8, "steps": 5}, {})["lr"] == 0.05  # the task's first lr
    with pytest.raises(PrenetError, match="--batch-size and --steps"):
        fine_tune_settings(task, {}, {})


def test_answer_gives_the_default_and_both_variants(tmp_path):
    task = pick_task(TASKS, "tiny_digits", "x.yaml")
    opt = fine_tune_settings(task, {"batch_size": 16, "steps": 30}, {})
    res = answer(task, opt, eps=0.1, target_loss=1e-9, pretrained=tmp_path / "pt")
    assert res["n_train"] == 48 and res["variant"] in ("plain", "relinearized") and res["correction"] == "trajectory"
    assert res["steps_to_loss"]["answer"] is None  # unreachable within 30 steps
    assert res["steps_to_loss"]["horizons"] == [(30, None)]  # not reached: no second pass
    early = answer(task, fine_tune_settings(task, {"batch_size": 16, "steps": 400}, {}), eps=0.1, target_accuracy=0.3, pretrained=tmp_path / "pt")
    first, *again = early["steps_to_accuracy"]["horizons"]  # reached early in 400 steps: forecast again at twice its answer
    assert first[0] == 400 and again and again[0][0] == max(2 * first[1], 8) and "forecast again at twice each answer" in render(early)
    text = render(res)
    assert "answered by the" in text and "not reached within 30 steps" in text and "along the forecast's trajectory" in text
    assert "chosen: samples: all 48 samples" in text and "; kernel: the " in text  # what the default chose, and why
    sub = render(answer(task, opt, eps=0.1, pretrained=tmp_path / "pt", subset=16))
    assert "subset optimism: the 16 fitted samples' loss is moved by half its generalization gap, measured on 32 held-out" in sub
    left = {"task": "t", "n_params": 10, "n_train": 40, "loss": "cross_entropy", "lr": 0.1, "momentum": 0.0, "batch_size": 8, "steps": 100}
    left |= {"dynamics": "sde", "ntk": "exact", "n_used": 8, "seconds": 1.0, "variant": "plain", "loss_curve": {"0": 1.0}, "drift": None}
    left |= {"steps_to_converge": {"eps": 0.1, "answer": 50, "plain": 50}, "heldout": {"samples": 32, "gaps": []}}
    left["heldout"]["gaps"] = [{"step": s, "loss_gap": 0.1, "off_linear": o, "used": o <= 0.5} for s, o in ((0, 0.0), (25, 0.3), (100, 0.9))]
    text = render(left)
    assert "measured on 32 held-out samples at steps 0, 25 (gap at step 25: +0.1000 loss); not at steps 100, where" in text
    assert "caution: from step 100 the network at the forecast's weights is 0.90 of its move away from the linearized outputs" in text
    probed = answer(task, opt, eps=0.1, pretrained=tmp_path / "pt", correction="probe")
    assert probed["variant"] in ("plain", "corrected") and "kernel drift after a" in render(probed)
    with pytest.raises(PrenetError, match="target accuracy = 95"):
        answer(task, opt, eps=0.1, target_accuracy=95, pretrained=tmp_path / "pt")


def test_outcome_file_errors_and_answer(tiny_run, tmp_path):
    _, cfg, _ = tiny_run
    with pytest.raises(PrenetError, match="does not exist"):
        read_telemetry(tmp_path / "missing.csv")
    garbage = tmp_path / "x.parquet"
    garbage.write_text("not parquet")
    with pytest.raises(PrenetError, match="not a readable CSV or parquet"):
        read_telemetry(garbage)
    tel = pl.read_parquet(cfg.paths.outcome_telemetry)
    f = tmp_path / "run.csv"
    tel.filter(pl.col("run_id") == tel["run_id"][0]).drop("run_id").write_csv(f)
    out, warned = predict_file(f, models_dir=cfg.paths.outcome_models)
    assert 0.0 <= out.final_test_accuracy <= 1.0 and isinstance(warned, list)
    assert render_outcome(out).endswith("prenet never stops a run by itself.")
