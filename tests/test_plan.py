"""`prenet plan`: the chained prediction (step time × steps × price), its intervals, memory fit, and its errors —
on the models and metrics of the tiny pipeline run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from pipeline.cli import main
from prenet.errors import PrenetError
from prenet.planner.intervals import Intervals, load_intervals, loo_coverage, steps_interval
from prenet.planner.plan import make_plan
from prenet.planner.render import format_duration, render_table


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to evaluate_ops and evaluate_convergence (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("evaluate_ops", "evaluate_convergence")


def _args(root, *extra):
    return ["plan", "--models", str(root / "models" / "steptime_ops"), "--intervals", str(root / "models" / "intervals"), *extra]


def _plan_json(capsys, root, *extra):
    assert main(_args(root, *extra, "--json")) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_intervals_combine_the_measured_ratios():
    iv = Intervals(step_local=[0.5, 1.0, 2.0], step_gpu=[0.9, 1.1], steps=None, memory_ratio_max=1.2, coverage=1.0)
    assert iv.bounds("cpu") == (0.5, 2.0) and iv.bounds("gpu") == pytest.approx((0.9, 1.1))
    both = Intervals(step_local=[0.5, 2.0], step_gpu=[1.0], steps=[0.5, 3.0], memory_ratio_max=None, coverage=1.0)
    assert both.bounds("cpu") == (0.25, 6.0)  # the extreme products of the two ratio sets
    assert steps_interval(100, both) == (50, 300)
    assert steps_interval(100, iv) == (100, 100)  # given steps are exact
    assert loo_coverage([1.0] * 9 + [5.0], 0.8) == 0.9  # the outlier falls outside what the others span
    assert loo_coverage([1.0, 2.0], 0.8) is None
    assert format_duration(0.25) == "250ms" and format_duration(5400) == "1.5h" and format_duration(3 * 86400) == "3.0d"
    assert format_duration(229.6 * 86400) == "230d"


def test_plan_every_hardware_fits_80_columns_and_ranks_by_cost(tiny_run, capsys):
    root, _, _ = tiny_run
    assert main(_args(root, "--model", "mlp", "--batch-size", "16", "--dataset-size", "1000", "--epochs", "2")) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()) and "…" not in out, max(out.splitlines(), key=len)
    assert "H100 SXM5 80GB" in out and "local" in out and "steps: 126 (epochs)" in out
    d = _plan_json(capsys, root, "--model", "mlp", "--batch-size", "16", "--dataset-size", "1000", "--epochs", "2")
    assert d["steps"] == 2 * math.ceil(1000 / 16) and d["sort"] == "cost"
    priced = [r for r in d["rows"] if r["cost_usd"] is not None]
    assert len(priced) >= 5 and [r["cost_usd"] for r in priced] == sorted(r["cost_usd"] for r in priced)
    assert d["rows"][: len(priced)] == priced  # unpriced after priced
    for r in d["rows"]:
        # an epoch is split over an option's GPUs (batch 16 per GPU)
        assert r["steps"] == 2 * math.ceil(1000 / (16 * r["gpus"] * r["nodes"]))
        assert r["wall_seconds"] == pytest.approx(r["step_seconds"] * r["steps"])
        assert 0 < r["wall_low"] <= r["wall_high"] and r["step_low"] <= r["step_high"]
        if r["cost_usd"] is not None:
            assert r["cost_usd"] == pytest.approx(r["wall_seconds"] / 3600 * r["usd_per_hour"])
            assert r["cost_low"] == pytest.approx(r["wall_low"] / 3600 * r["usd_per_hour"])
    m = d["memory"]
    assert (
        m["total_bytes"]
        == (
            m["weights_bytes"] + m["inputs_bytes"] + m["optimizer_bytes"] + max(m["backward_live_bytes"] + m["transient_bytes"], m["gradients_bytes"])
        )
        and m["weights_bytes"] > 0
    )
    assert m["gradients_bytes"] <= m["backward_live_bytes"] <= m["activations_bytes"] + m["gradients_bytes"]


def test_plan_sort_hardware_list_and_price_override(tiny_run, capsys):
    root, _, _ = tiny_run
    common = ("--model", "resnet18", "--batch-size", "8", "--steps", "1000", "--gpus", "1", "--hardware", "L4", "Tesla T4", "H100 SXM5 80GB")
    by_time = _plan_json(capsys, root, *common, "--sort", "time")
    assert [r["hardware"] for r in by_time["rows"]] == [r["hardware"] for r in sorted(by_time["rows"], key=lambda r: r["wall_seconds"])]
    assert len(by_time["rows"]) == 3 and by_time["steps"] == by_time["steps_low"] == by_time["steps_high"] == 1000
    cheap = _plan_json(capsys, root, *common, "--price", "H100 SXM5 80GB=0.01")
    h100 = next(r for r in cheap["rows"] if r["hardware"] == "H100 SXM5 80GB")
    assert h100["usd_per_hour"] == 0.01 and cheap["rows"][0]["hardware"] == "H100 SXM5 80GB"


def test_memory_decides_fit_and_a_batch_that_fits_nowhere_is_an_error(tiny_run, capsys):
    root, _, _ = tiny_run
    d = _plan_json(
        capsys, root, "--model", "gpt2_small_like", "--batch-size", "1024", "--steps", "10", "--gpus", "1", "--hardware", "Tesla P4", "H200 SXM 141GB"
    )
    fit = {r["hardware"]: r["fits"] for r in d["rows"]}
    assert fit == {"Tesla P4": False, "H200 SXM 141GB": True}
    assert d["rows"][-1]["hardware"] == "Tesla P4"  # what does not fit ranks last
    assert main(_args(root, "--model", "gpt2_small_like", "--batch-size", "1024", "--steps", "10", "--hardware", "Tesla P4")) == 2
    err = capsys.readouterr().err
    assert "batch size 1024 does not fit" in err and "GiB" in err and "--batch-size" in err and len(err.strip().splitlines()) == 1


def _tiny_model_file(tmp_path, body: str):
    f = tmp_path / "net.py"
    f.write_text("import torch\nfrom torch import nn\n\n" + body)
    return f


GOOD = """def build(batch_size=8):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 3))
    return net, (torch.randn(batch_size, 64), torch.randint(0, 3, (batch_size,)))
"""


def _finetune_file(tmp_path):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    keep = y < 3
    f = tmp_path / "ft.pt"
    torch.save({"inputs": torch.tensor(x[keep][:96] / 16.0, dtype=torch.float32), "labels": torch.tensor(y[keep][:96])}, f)
    return f


def test_plan_from_a_convergence_target(tiny_run, tmp_path, capsys):
    root, _, _ = tiny_run
    model = _tiny_model_file(tmp_path, GOOD)
    data = _finetune_file(tmp_path)
    d = _plan_json(
        capsys,
        root,
        "--model",
        f"{model}:build",
        "--batch-size",
        "16",
        "--target-accuracy",
        "0.8",
        "--finetune-data",
        str(data),
        "--lr",
        "0.5",
        "--max-steps",
        "300",
        "--hardware",
        "local",
        "L4",
    )
    assert d["steps_from"] == "forecast" and 0 < d["steps"] < 300 and d["dataset_size"] == 96
    assert d["forecast"]["target"] == "target_accuracy" and d["forecast"]["n_train"] == 96
    iv = load_intervals(
        root / "models" / "intervals", steps_target="accuracy>=0.9", steps_source=d["forecast"]["answered_by"], drift=d["forecast"]["drift"]
    )
    assert (d["steps_low"], d["steps_high"]) == steps_interval(d["steps"], iv)  # scaled by the measured forecast errors
    assert all(r["wall_low"] <= r["wall_high"] for r in d["rows"])


def test_plan_says_when_its_forecast_skipped_some_relinearizations(tiny_run, tmp_path, capsys, monkeypatch):
    import prenet.planner.plan as plan_mod

    root, _, _ = tiny_run
    model, data = _tiny_model_file(tmp_path, GOOD), _finetune_file(tmp_path)
    info = {"steps": 40, "target": "target_accuracy", "value": 0.8, "loss": "cross_entropy", "lr": 0.5, "momentum": 0.0}
    info |= {"n_train": 96, "n_used": 96, "dynamics": "exact", "ntk": "exact", "seconds": 1.0, "horizons": [(300, 40)]}
    info |= {
        "drift": 0.5,
        "reliable": False,
        "followed": True,
        "answered_by": "default",
        "max_steps": 300,
        "cost": None,
        "skipped": ["dearer than the fine-tune"],
    }
    monkeypatch.setattr(plan_mod, "forecast_steps", lambda *a, **k: dict(info))
    argv = ["--model", f"{model}:build", "--batch-size", "16", "--target-accuracy", "0.8", "--finetune-data", str(data), "--lr", "0.5"]
    d = _plan_json(capsys, root, *argv, "--hardware", "local")
    assert d["steps"] == 40 and any("some re-linearizations were skipped (dearer than the fine-tune)" in n for n in d["notes"])


@pytest.mark.parametrize(
    "case,body,extra,message",
    [
        ("does not import", "raise RuntimeError('broken on purpose')\n", (), "failed to import: RuntimeError: broken on purpose"),
        ("wrong return", "def build(batch_size=8):\n    return nn.Linear(2, 2)\n", (), "must return (module, example_batch)"),
        ("unknown hardware", GOOD, ("--hardware", "H300"), "unknown hardware 'H300'"),
        ("never reached", GOOD, ("--target-loss", "1e-9", "--lr", "1e-5", "--max-steps", "20"), "does not reach loss ≤ 1e-09 within 20 steps"),
        ("no finetune data", GOOD, ("--target-loss", "0.1", "--lr", "0.1"), "give --finetune-data"),
        ("epochs without size", GOOD, ("--epochs", "3"), "--epochs needs --dataset-size"),
        ("zoo arg on a file model", GOOD, ("--zoo-arg", "image_size=224"), "--model-arg and --seq-len apply to named models only"),
    ],
)
def test_plan_errors_are_one_line_and_exit_2(tiny_run, tmp_path, capsys, case, body, extra, message):
    root, _, _ = tiny_run
    model = _tiny_model_file(tmp_path, body)
    args = ["--model", f"{model}:build"]
    if "--batch-size" not in extra:
        args += ["--batch-size", "8"]
    if not any(a in extra for a in ("--target-loss", "--epochs")):
        args += ["--steps", "100"]
    if "--target-loss" in extra and case == "never reached":
        args += ["--finetune-data", str(_finetune_file(tmp_path))]
    assert main(_args(root, *args, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_render_table_marks_tight_and_missing_prices(tiny_run):
    root, _, _ = tiny_run
    plan = make_plan(
        "mlp",
        batch_size=16,
        steps=50,
        hardware=["local", "RTX A4000"],
        prices={},
        models_dir=root / "models" / "steptime_ops",
        intervals_dir=root / "models" / "intervals",
    )
    text = render_table(plan, plan.sorted("name"))
    assert "- (no price)" in text and "fits" in text
    assert np.isfinite([r.step_seconds for r in plan.rows]).all()
    with pytest.raises(PrenetError, match="--sort"):
        plan.sorted("price")


def test_zoo_sizes_change_the_plan(tiny_run, capsys):
    root, _, _ = tiny_run
    small = _plan_json(capsys, root, "--model", "resnet18", "--batch-size", "8", "--steps", "10", "--hardware", "L4")
    big = _plan_json(capsys, root, "--model", "resnet18", "--zoo-arg", "image_size=128", "--batch-size", "8", "--steps", "10", "--hardware", "L4")
    assert big["model"] == "resnet18 (image_size=128)"
    assert big["memory"]["activations_bytes"] == pytest.approx(4 * small["memory"]["activations_bytes"], rel=0.05)
    assert big["rows"][0]["step_seconds"] > small["rows"][0]["step_seconds"]
    assert main(_args(root, "--model", "resnet18", "--zoo-arg", "depth=3", "--batch-size", "8", "--steps", "10")) == 2
    assert "its sizes are image_size" in capsys.readouterr().err


def test_plan_states_precision_shape_params_and_family_shares(tiny_run, capsys):
    root, _, _ = tiny_run
    out = _plan_json(
        capsys,
        root,
        "--model",
        "resnet18",
        "--batch-size",
        "8",
        "--steps",
        "10",
        "--precision",
        "bf16",
        "--gpus",
        "1",
        "--hardware",
        "H100 SXM5 80GB",
        "V100 PCIe 16/32GB",
    )
    assert out["precision"] == "bf16" and out["input_shape"] == [8, 3, 64, 64] and out["params"] > 1e6
    assert [r["hardware"] for r in out["rows"]] == ["H100 SXM5 80GB"]  # the V100 has no BF16 unit: a note, not a row
    assert any("V100 PCIe 16/32GB: not planned, no bf16 unit" in n for n in out["notes"])
    assert sum(out["rows"][0]["family_share"].values()) == pytest.approx(1.0, abs=1e-3) and "conv" in out["rows"][0]["family_share"]
    assert main(_args(root, "--model", "resnet18", "--batch-size", "8", "--steps", "10", "--hardware", "local")) == 0
    text = capsys.readouterr().out
    assert "input 8x3x64x64" in text and "fp32" in text and "time by op family on local" in text


def test_plan_says_which_gpus_run_fp32_convolutions_on_tf32(tiny_run, capsys):
    """fp32 is torch's defaults: an Ampere+ option's convolutions run on its TF32 units (and faster there than on the FP32
    units), a V100's do not; the plan says which options assume it."""
    root, _, _ = tiny_run
    args = ("--model", "resnet18", "--batch-size", "8", "--steps", "10", "--gpus", "1", "--hardware", "A100 80GB SXM4", "V100 PCIe 16/32GB")
    notes = [n for n in _plan_json(capsys, root, *args)["notes"] if "fp32 as torch runs it" in n]
    assert len(notes) == 1 and "A100 80GB SXM4" in notes[0] and "V100" not in notes[0]


def test_plan_prices_node_options(tiny_run, capsys):
    """1, 2 and 8 GPUs of each GPU: the price counts every GPU, an epoch is split over them, compute and communication
    are apart, and a count larger than a node holds is left out with a note."""
    root, _, _ = tiny_run
    d = _plan_json(
        capsys, root, "--model", "resnet18", "--batch-size", "8", "--dataset-size", "800", "--epochs", "1",
        "--hardware", "A100 80GB SXM4", "RTX 4090", "--gpus", "1", "2", "8", "32", "--price", "RTX 4090=0.5",
    )  # fmt: skip
    rows = {r["hardware"]: r for r in d["rows"]}
    assert set(rows) == {f"{n}{h}" for n in ("", "2× ", "8× ") for h in ("A100 80GB SXM4", "RTX 4090")}
    eight = rows["8× RTX 4090"]
    assert eight["usd_per_hour"] == pytest.approx(8 * 0.5) and eight["steps"] == math.ceil(800 / (8 * 8)) and eight["device"] == "RTX 4090"
    p = eight["parallel"]
    assert p["strategy"] == "ddp" and p["gpus"] == 8 and p["comm_ms"] > 0 and 0 <= p["exposed_ms"] <= p["comm_ms"]
    assert eight["step_seconds"] == pytest.approx((p["compute_ms"] + p["exposed_ms"] + p["sync_ms"]) / 1e3)
    # NVLink moves the same gradients faster than PCIe without peer-to-peer
    assert rows["8× A100 80GB SXM4"]["parallel"]["comm_ms"] < p["comm_ms"]
    assert any("32 GPUs" in n and "node" in n for n in d["notes"]) and any("RTX 4090 has no peer-to-peer" in n for n in d["notes"])


def test_plan_tensor_parallel_options_split_the_blocks_and_their_memory(tiny_run, capsys):
    """tp:2 plans the GPU counts 2 divides: each option's step splits the blocks over 2 GPUs, all-reduces their stream,
    holds less model state per GPU, and shares an epoch over the data-parallel replicas only."""
    root, _, _ = tiny_run
    base = ("--model", "bert_base_like", "--batch-size", "4", "--dataset-size", "400", "--epochs", "1", "--hardware", "A100 80GB SXM4")
    one = {r["hardware"]: r for r in _plan_json(capsys, root, *base)["rows"]}["A100 80GB SXM4"]
    d = _plan_json(capsys, root, *base, "--gpus", "1", "3", "4", "--parallel", "tp:2")
    rows = {r["hardware"]: r for r in d["rows"]}
    assert set(rows) == {"A100 80GB SXM4", "4× A100 80GB SXM4"}  # 3 GPUs: 2 does not divide it
    four = rows["4× A100 80GB SXM4"]
    p = four["parallel"]
    assert p["strategy"] == "tp" and p["tp"] == 2 and p["comm_ms"] > 0 and p["exposed_ms"] >= p["comm_ms"] * 0.5
    assert four["steps"] == math.ceil(400 / (4 * 2))  # two replicas of two GPUs
    assert four["memory_bytes"] < one["memory_bytes"]
    assert any("tp:2 needs a multiple of 2" in n for n in d["notes"])


def test_plan_steps_count_one_gpus_batches_and_host_bound_gpus_are_named(tiny_run, capsys):
    """--steps N on 1 and 8 GPUs is the same job: 8 replicas run N/8 steps. A step whose ops the host issues slower
    than the GPU runs them is named host-bound (the tiny models' host cost, raised here)."""
    root, _, _ = tiny_run
    import shutil

    ops = shutil.copytree(root / "models" / "steptime_ops", root / "models" / "steptime_ops_host")
    manifest = json.loads((ops / "gpu" / "manifest.json").read_text())  # the GPU part holds the host cost
    (ops / "gpu" / "manifest.json").write_text(json.dumps({**manifest, "host_ms": {"gpu": 0.2}}))
    d = _plan_json(
        capsys, root, "--model", "mlp", "--batch-size", "8", "--steps", "800", "--hardware", "A100 80GB SXM4",
        "--gpus", "1", "8", "--models", str(ops),
    )  # fmt: skip
    rows = {r["hardware"]: r for r in d["rows"]}
    assert rows["A100 80GB SXM4"]["steps"] == 800 and rows["8× A100 80GB SXM4"]["steps"] == 100
    assert any(n.startswith("--steps 800 counts steps of one GPU's batch (8 samples)") for n in d["notes"])
    assert any(n.startswith("host-bound on A100 80GB SXM4") for n in d["notes"])


def test_unreadable_finetune_data_is_one_line(tmp_path):
    from prenet.planner.plan import load_finetune_data

    src = tmp_path / "net.py"  # a user's model file given where the data goes: torch's unpickling error is paragraphs
    src.write_text("import torch\nimport torch.nn as nn\n\ndef build():\n    return nn.Linear(2, 2)\n")
    with pytest.raises(PrenetError) as e:
        load_finetune_data(src)
    assert "\n" not in str(e.value) and "is not readable" in str(e.value) and ".npz with arrays inputs, labels" in str(e.value)


def test_a_target_reached_early_is_forecast_again_at_twice_its_answer():
    from sklearn.datasets import load_digits
    from torch import nn

    from prenet.convergence.forecaster import REFINE_RATIO, REFINE_ROUNDS
    from prenet.planner.plan import forecast_steps

    torch.manual_seed(0)
    X, y = load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    body = nn.Sequential(nn.Linear(64, 32), nn.ReLU())
    net = nn.Sequential(body, nn.Linear(32, 5))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):  # pre-train on digits 0-4, then a new head for 5-9: the kernel grows as the head learns
        for i in range(0, 900, 64):
            xb, yb = X[y < 5][i : i + 64], y[y < 5][i : i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xb), yb).backward()
            opt.step()
    model = nn.Sequential(body, nn.Linear(32, 5))
    kw = dict(target="target_accuracy", value=0.8, loss="cross_entropy", lr=0.2, momentum=0.0, batch_size=32, subset=None)
    out = forecast_steps(model, X[y >= 5][:200], y[y >= 5][:200] - 5, max_steps=1000, **kw)
    hz = out["horizons"]
    assert hz[0][0] == 1000 and 1 < len(hz) <= REFINE_ROUNDS + 1 and REFINE_RATIO * hz[0][1] <= 1000
    assert all(h == max(2 * at, 8) for (h, _), (_, at) in zip(hz[1:], hz[:-1]))  # each pass at twice the last answer
    assert out["steps"] == (hz[-1][1] if hz[-1][1] is not None else hz[-2][1])
    assert out["seconds"] > 0 and out["cost"]["ratio_estimate"] == pytest.approx(out["cost"]["train_seconds_estimate"] / out["seconds"])


def test_an_interval_wholly_on_one_side_of_the_estimate_says_why():
    # a new user's plan printed "local 158.7s 28.7d [29.6d–34.8d]": every zoo step on this CPU had run slower than
    # predicted, so the interval (measured / predicted) excluded the estimate, unexplained
    from prenet.planner.intervals import Intervals
    from prenet.planner.plan import interval_side_note

    iv = Intervals(step_local=[1.03, 1.05, 1.1, 1.2, 1.27], step_gpu=[0.8, 1.0, 1.2], steps=None, memory_ratio_max=None)
    note = interval_side_note(iv, "cpu")
    assert note is not None and "ran 4-24 % slower than predicted" in note and "lies above the estimate" in note  # 10th-90th pct
    assert interval_side_note(iv, "gpu") is None  # the estimate inside its interval: nothing to say


def test_a_spec_file_row_is_named_as_its_device(tiny_run, tmp_path, capsys):
    # a new user's plan labelled a spec file's rows with the file's path
    root, _, _ = tiny_run
    spec = tmp_path / "ada.yaml"
    spec.write_text("name: RTX 6000 Ada\nkind: gpu\npeak_fp32_tflops: 91.1\nmem_bw_gbps: 960\ncores: 18176\nclock_mhz: 2505\nmem_gb: 48\n")
    out = _plan_json(
        capsys, root, "--model", "mlp", "--batch-size", "8", "--steps", "100", "--gpus", "1", "--hardware", str(spec), "--hardware", "L4"
    )
    assert sorted(r["hardware"] for r in out["rows"]) == ["L4", "RTX 6000 Ada"]
