"""Whole-model and layer-table predictions through the API and the CLI, with the errors a user can act on."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from pipeline.cli import main
from prenet.api import predict_layers, predict_step_time
from prenet.errors import PrenetError


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to the op-level model's two parts (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("train_gpu_ops", "train_ops")


@pytest.fixture
def models_dir(tiny_run):
    return tiny_run[1].paths.models_ops


def test_step_time_of_a_zoo_model_sums_its_ops(models_dir):
    p = predict_step_time("mlp", batch_size=32, hardware="local", models_dir=models_dir, dataset_size=1000, overhead_ms=0.0)
    assert p.step_seconds > 0 and p.steps_per_epoch == 32 and p.epoch_seconds == pytest.approx(32 * p.step_seconds)
    assert p.step_seconds * 1e3 == pytest.approx(sum(p.family_ms.values()) + p.dram_refetch_ms + p.llc_refetch_ms)
    assert {"gemm", "loss", "optimizer"} <= set(p.family_ms)  # forward, the loss, backward and the update are all in the step
    assert p.input_shape == [32, 784] and p.params > 0 and p.precision == "fp32"
    assert sum(p.estimate_share.values()) == pytest.approx(1.0)


def _local_cpu(cache_mb: float | None):
    """This machine's CPU as the benchmark recorded it (or measures it), with the cache capacity ``cache_mb``."""
    import dataclasses

    from prenet.api import _hardware

    return dataclasses.replace(_hardware("local", 1), cache_mb=cache_mb)


def test_a_cpu_step_fetches_from_dram_the_operands_it_touched_further_back_than_its_caches_hold(models_dir):
    """The batch-16 MLP (2.9 M parameters: 22 MiB of weights and gradients) spends its time in skinny GEMMs of 3-4 MB,
    timed in place with warm operands: on a CPU whose caches hold 12 MB, each forward GEMM reads a weight matrix the
    previous step's optimizer last wrote (further back than the caches hold), and the step adds those bytes at the
    DRAM bandwidth and says so; where the caches hold its data, or on a GPU, nothing is added; a record without a
    measured capacity only warns."""
    from prenet.steptime.step import CPU_ALLOCATOR_NOTE, CPU_HOST_SPEED_NOTE, dram_refetch_ms

    def cache_notes(p) -> list[str]:
        return [n for n in p.notes if n.startswith("cache:")]

    kw = dict(batch_size=16, models_dir=models_dir, overhead_ms=0.0)
    small = _local_cpu(12.0)
    mlp = predict_step_time("mlp", hardware=small, **kw)
    weights = (784 * 1024 + 2 * 1024 * 1024) * 4  # the hidden layers' weights the forward GEMMs read
    assert mlp.dram_refetch_ms >= weights / (small.mem_bw_gbps * 1e9) * 1e3
    assert mlp.step_seconds * 1e3 == pytest.approx(sum(mlp.family_ms.values()) + mlp.dram_refetch_ms + mlp.llc_refetch_ms)
    assert (
        len(cache_notes(mlp)) == 1
        and "(measured; the step's weights" in cache_notes(mlp)[0]
        and f"+ {mlp.dram_refetch_ms:.2f} ms" in cache_notes(mlp)[0]
    )
    roomy = predict_step_time("mlp", hardware=_local_cpu(64.0), **kw)
    assert roomy.dram_refetch_ms == 0 and not cache_notes(roomy)
    assert roomy.step_seconds < mlp.step_seconds and roomy.family_ms == pytest.approx(mlp.family_ms)  # one op, one time
    old = predict_step_time("mlp", hardware=_local_cpu(None), **kw)
    assert old.dram_refetch_ms == 0 and "lower bound" in cache_notes(old)[0]
    gpu = predict_step_time("mlp", hardware="Tesla T4", **kw)
    assert gpu.dram_refetch_ms == 0 and not cache_notes(gpu)
    # the allocator the CPU timings assume is said with every CPU answer (a plain glibc malloc step is slower), not a GPU's
    assert [n for n in mlp.notes if n.startswith("allocator:")] == [CPU_ALLOCATOR_NOTE]
    assert not [n for n in gpu.notes if n.startswith("allocator:")]
    # ... and that it is answered at the speed the host had when its ops were benchmarked (a shared VM's drifts)
    assert [n for n in mlp.notes if n.startswith("host speed:")] == [CPU_HOST_SPEED_NOTE]
    assert not [n for n in gpu.notes if n.startswith("host speed:")]
    # skinny GEMM, small op, dense op
    ops = pl.DataFrame({"bytes": [4.3e6, 0.5e6, 4.3e6], "flops": [3.4e7, 1e6, 1e9], "predicted_ms": [0.5, 0.05, 20.0]})
    # the cold bytes of the memory-bound ones, however small; not the dense one's; nothing without reads
    cold = np.array([4.0e6, 0.2e6, 4.0e6])
    bw = small.mem_bw_gbps * 1e9
    assert dram_refetch_ms(ops, small, cold) == pytest.approx(4.2e6 / bw * 1e3)
    assert dram_refetch_ms(ops, small, None) == 0.0
    # a memory-bound op larger than the 12 MB the caches hold (an SGD update of 14 MB, answered at its in-place 56 GB/s):
    # its cold 8 MB no faster than DRAM, less what its predicted time already pays for them; one already that slow adds
    # nothing
    upd = pl.DataFrame({"bytes": [14e6, 14e6], "flops": [3e6, 3e6], "predicted_ms": [0.25, 14e6 / bw * 1e3]})
    assert dram_refetch_ms(upd, small, np.array([8e6, 8e6])) == pytest.approx(8e6 / bw * 1e3 - 0.25 * 8 / 14)


def test_reuse_distances_count_the_distinct_bytes_touched_since_the_last_touch():
    """LRU stack distances over a step replayed back to back: a read of what the op before wrote is at distance 0; a
    read after other storages were touched counts each of them once, however often; a weight the optimizer wrote at
    the end of the step is read by the next step's forward after everything touched in between; a storage touched
    once only is at the step's whole distinct footprint less itself; a read is cold where it and what came after it
    outgrow the caches."""
    from prenet.ops.reuse import cold_bytes, read_distances

    # (record, storage, bytes, read): 0 reads w (10) and x (1), writes y (5); 1 reads y; 2 reads y, writes z (7)
    # twice; 3 reads z and w, writes w (an optimizer); 4 writes v (2)
    touches = [(0, 1, 10, True), (0, 2, 1, True), (0, 3, 5, False), (1, 3, 5, True), (2, 3, 5, True), (2, 4, 7, False)]
    touches += [(2, 4, 7, False), (3, 4, 7, True), (3, 1, 10, True), (3, 1, 10, False), (4, 5, 2, False)]
    d = read_distances(touches, 5)
    assert d[1] == [[5, 0]] and d[2] == [[5, 0]] and d[4] == []
    assert d[3] == [[7, 0], [10, 1 + 5 + 7]]  # w: since record 0 read it, x, y and z (z once, though touched thrice)
    assert d[0] == [[10, 2], [1, 5 + 7 + 10 + 2]]  # next step: w since the optimizer wrote it (v); x: all but itself
    # cold where the operand and what came after it outgrow the capacity: w (10 + 2), x (1 + 24)
    assert cold_bytes(d[0], 11) == 11 and cold_bytes(d[0], 13) == 1 and cold_bytes(d[0], 25) == 0


def test_a_cpu_grus_gates_read_what_the_op_before_them_wrote(models_dir):
    """A GRU's per-timestep gate ops (KBs each) read the hidden projection the step just computed: warm, however
    large the step's data; their reads stay out of the DRAM refetch (until 2026-12-06 every such op of a step whose
    data outgrew the caches counted as fetched from DRAM: gru_tagger at batch 16 was predicted 55 % too slow here)."""
    from prenet import zoo
    from prenet.ops import trace_step

    with torch.device("meta"):
        module, batch = zoo.build("gru_tagger", 16, None)
    trace = trace_step(module, batch, optimizer="sgd", device_type="cpu")
    gates = [r for r in trace.records if r.op == "sigmoid_" and r.phase == "forward"]
    assert len(gates) == 2 * 2 * 40 and all(r.reads and max(d for _, d in r.reads) < 2**20 for r in gates)


def test_the_activations_a_cpu_step_saves_count_towards_its_working_set(models_dir):
    """A convolutional step of few parameters and large activations: its forward saves activations for the backward
    (traced on meta, as the memory estimate traces them), and those count towards the step's data the cache note
    names; the backward's reads of them come from DRAM when the caches hold less than was touched since; a GPU trace
    records none."""
    import dataclasses

    import torch
    from torch import nn

    from prenet.memory.training import trace_saved
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import ACTIVATION_GRAD_SHARE, CACHE_FILL_SHARE, predict_trace, step_data_bytes

    with torch.device("meta"):
        net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.Flatten(), nn.Linear(32 * 64 * 64, 10)
        )
        batch = (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,)))
    trace = trace_step(net, batch, optimizer="sgd", device_type="cpu")
    saved = sum(trace_saved(net, batch)[0])
    assert trace.activation_bytes == saved > 16 * 32 * 64 * 64 * 4  # at least the first convolution's output
    params_only = dataclasses.replace(trace, activation_bytes=None)
    # the saved activations, and the gradients of them the backward writes (ACTIVATION_GRAD_SHARE)
    assert step_data_bytes(trace) == pytest.approx(step_data_bytes(params_only) + (1 + ACTIVATION_GRAD_SHARE) * saved)
    model = EfficiencyModel.load(models_dir)
    # the batch norm's backward reads the convolution output its forward saved, with the rest of the step in between:
    # cold in caches smaller than that, warm in larger ones; the note names the step's data, activations included
    bn = next(r for r in trace.records if r.op == "native_batch_norm_backward")
    far = max(d for _, d in bn.reads)
    assert far > 16 * 32 * 64 * 64 * 4
    small, roomy = _local_cpu(far / 2 / CACHE_FILL_SHARE / 2**20), _local_cpu(4 * step_data_bytes(trace) / CACHE_FILL_SHARE / 2**20)
    with_acts, _ = predict_trace(trace, small, model)
    assert with_acts.dram_refetch_ms > 0 == predict_trace(trace, roomy, model)[0].dram_refetch_ms
    assert any("saved activations" in n for n in with_acts.notes)
    assert trace_step(net, batch, optimizer="sgd", device_type="cuda").activation_bytes is None
    # attention as the CPU step runs it (flash attention keeps no L×L matrix), not as the math path would save it
    from prenet import zoo

    with torch.device("meta"):
        vit, images = zoo.build("vit_tiny", 8, None)
    math_path = sum(trace_saved(vit, images)[0])  # 31.3 MB; as run, 26.5 MB
    assert trace_step(vit, images, optimizer="sgd", device_type="cpu").activation_bytes < 0.9 * math_path


def test_the_cache_capacity_is_where_copies_fall_below_most_of_the_cache_bandwidth(monkeypatch):
    """The capacity is the copy footprint where the bandwidth falls below CACHE_HOLD_SHARE of the way from DRAM to cache
    bandwidth, interpolated between the measured footprints."""
    from prenet.hardware import local

    curve = {1: 89.0, 2: 93.0, 4: 95.0, 6: 77.0, 8: 70.0, 12: 46.0, 16: 34.0, 24: 28.0, 32: 26.0}  # copy MB -> GB/s
    monkeypatch.setattr(local, "measure_bandwidth_gbps", lambda size_mb, repeats=5: curve[int(size_mb)])
    threshold = 20.0 + local.CACHE_HOLD_SHARE * (95.0 - 20.0)  # 76.25 GB/s: 77 at a 12 MB footprint, 70 at 16
    assert local.measure_cache_mb(95.0, 20.0) == pytest.approx(12 + 4 * (77 - threshold) / (77 - 70))
    monkeypatch.setattr(local, "measure_bandwidth_gbps", lambda size_mb, repeats=5: 20.0)
    assert local.measure_cache_mb(95.0, 20.0) == 2.0  # not even the smallest footprint runs from the caches


def test_unseen_hardware_from_its_spec_sheet(models_dir, tmp_path):
    spec = tmp_path / "gpu.yaml"
    spec.write_text("name: Imaginary 1\nkind: gpu\npeak_fp32_tflops: 50\nmem_bw_gbps: 2000\ncores: 10000\nclock_mhz: 1800\n")
    a = predict_step_time("resnet18", batch_size=16, hardware=str(spec), models_dir=models_dir)
    b = predict_step_time("resnet18", batch_size=16, hardware="Tesla P4", models_dir=models_dir)
    assert a.hardware["hardware_id"] == "Imaginary 1" and a.step_seconds > 0 and b.step_seconds > 0


def test_user_function_with_batch_size(models_dir, tmp_path):
    f = tmp_path / "net.py"
    f.write_text(
        "import torch\nfrom torch import nn\n"
        "def build(batch_size):\n    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3)), "
        "(torch.randn(batch_size, 10), torch.randint(0, 3, (batch_size,)))\n"
    )
    p = predict_step_time(f"{f}:build", batch_size=7, hardware="local", models_dir=models_dir)
    assert p.batch_size == 7 and p.params == 10 * 20 + 20 + 20 * 3 + 3 and p.ops > 4


def test_the_api_refuses_a_batch_size_that_is_not_a_positive_integer():
    from prenet.errors import PrenetError

    for bad in (-1, 0, 2.5):
        with pytest.raises(PrenetError, match="batch_size must be a positive integer"):
            predict_step_time("mlp", batch_size=bad, hardware="A100")
    import torch

    with pytest.raises(PrenetError, match=r"^predict_step_time: model is a Sequential; pass \(module, example_batch\)"):
        predict_step_time(torch.nn.Sequential(torch.nn.Linear(4, 2)), batch_size=8, hardware="A100")


def test_a_module_and_its_example_are_answered_at_the_batch_asked(models_dir):
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    example = (torch.randn(32, 64), torch.randint(0, 10, (32,)))
    p = predict_step_time((net, example), batch_size=64, hardware="A100", dataset_size=1000, models_dir=models_dir)
    assert p.batch_size == 64 and p.input_shape == [64, 64] and p.steps_per_epoch == 16


def test_a_user_function_without_batch_size_is_answered_at_the_batch_asked(tmp_path):
    from prenet.user_models import build_model

    f = tmp_path / "fixed.py"
    f.write_text("import torch\nfrom torch import nn\ndef build():\n    return nn.Linear(10, 3), (torch.randn(4, 10), torch.arange(4) % 3)\n")
    for asked in (128, 4, 2):
        _, (x, y) = build_model(f"{f}:build", asked)
        assert x.shape == (asked, 10) and y.shape == (asked,)
    _, (x, y) = build_model(f"{f}:build", 6)
    assert y.tolist() == [0, 1, 2, 0, 0, 1]  # its own four samples, in turn


def test_a_model_file_that_imports_torchvision_loads(tmp_path):
    # in a fresh process: this venv's torchvision wheel fails a plain `import torchvision` ("operator torchvision::nms
    # does not exist"); a user's file that imports it loads as torchvision:NAME models do (prenet.torchvision_import)
    import subprocess
    import sys

    f = tmp_path / "net.py"
    f.write_text(
        "import torch, torchvision\nprint('ran')\ndef build():\n    return torchvision.models.resnet18(num_classes=3), torch.randn(2, 3, 32, 32)\n"
    )
    code = f"from prenet.user_models import load_model_function; m, x = load_model_function({str(f) + ':build'!r})(); print(type(m).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ran", "ResNet"], out.stderr[-500:]  # the file ran once


@pytest.mark.parametrize(
    "source,fn,message",
    [
        ("import nosuchmodule\n", "build", "failed to import: ModuleNotFoundError"),
        ("def build(batch_size):\n    return 42\n", "build", "must return (module, example_batch)"),
        ("def other():\n    pass\n", "build", "has no function 'build'"),
        (
            "import torch\nfrom torch import nn\ndef build(batch_size):\n    return nn.Sequential(nn.Linear(10, 5), nn.Linear(6, 3)), "
            "(torch.randn(batch_size, 10), torch.randint(0, 3, (batch_size,)))\n",
            "build",
            "the model's forward failed in 1",
        ),
    ],
)
def test_cli_model_errors_are_one_line(models_dir, tmp_path, capsys, source, fn, message):
    f = tmp_path / "bad.py"
    f.write_text(source)
    code = main(["predict", "step-time", "--model", f"{f}:{fn}", "--batch-size", "4", "--models", models_dir])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_step_time_json(models_dir, capsys):
    assert (
        main(
            [
                "predict",
                "step-time",
                "--model",
                "mlp",
                "--batch-size",
                "16",
                "--hardware",
                "T4",
                "--dataset-size",
                "160",
                "--models",
                models_dir,
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert {"step_seconds", "epoch_seconds", "hardware", "family_share", "estimate_share", "input_shape", "params", "precision"} <= set(out)
    assert out["hardware"]["hardware_id"] == "Tesla T4" and out["epoch_seconds"] == pytest.approx(10 * out["step_seconds"])


def test_cli_unknown_hardware(models_dir, capsys):
    assert main(["predict", "step-time", "--model", "mlp", "--batch-size", "4", "--hardware", "H300", "--models", models_dir]) == 2
    assert "Closest matches" in capsys.readouterr().err


def test_layer_csv_round_trip(models_dir, tmp_path):
    src = tmp_path / "shapes.csv"
    src.write_text(
        "op,batch,in_features,out_features,in_channels,out_channels,kernel_size,input_size,stride,padding,direction,dtype\n"
        "linear,32,512,256,,,,,,,forward,float32\n"
        "conv2d,8,3,16,,,,,,,train_step,float32\n".replace("conv2d,8,3,16,,,,,,,", "conv2d,8,,,3,16,3,32,1,1,")
    )
    out = tmp_path / "pred.csv"
    assert main(["predict", "layers", "--hardware", "V100 PCIe 16/32GB", "--input", str(src), "--output", str(out), "--models", models_dir]) == 0
    df = pl.read_csv(out)
    assert df.height == 2 and (df["predicted_ms"] > 0).all()
    # written at 4 significant figures, not a float64's 17 digits
    assert all(len(v.split(",")[-1].replace(".", "").lstrip("0")) <= 4 for v in out.read_text().splitlines()[1:])


def test_header_only_layer_csv_is_one_line(models_dir, tmp_path, capsys):
    src = tmp_path / "shapes.csv"
    src.write_text("op,batch,in_features,out_features,direction,dtype\n")
    assert main(["predict", "layers", "--hardware", "T4", "--input", str(src), "--output", str(tmp_path / "o.csv"), "--models", models_dir]) == 2
    err = capsys.readouterr().err
    assert "header but no rows" in err and err.strip().count("\n") == 0


def test_layer_csv_invalid_rows_are_reported_and_nothing_is_written(models_dir, tmp_path, capsys):
    src = tmp_path / "shapes.csv"
    src.write_text(
        "op,batch,in_features,out_features,direction,dtype\n"
        "linear,32,512,256,forward,float32\n"
        "linear,-1,512,256,forward,float32\n"
        "lineer,1,2,3,forward,float32\n"
        "linear,4,5,6,sideways,float8\n"
        "linear,,512,256,forward,float32\n"
    )
    out = tmp_path / "pred.csv"
    assert main(["predict", "layers", "--hardware", "T4", "--input", str(src), "--output", str(out), "--models", models_dir]) == 2
    err = capsys.readouterr().err
    for part in (
        "row 2, column batch",
        "row 3, column op",
        "row 4, column direction",
        "row 4, column dtype",
        "row 5, column batch: linear needs a positive integer, the cell is empty",
    ):
        assert part in err
    assert not out.exists() and not list(tmp_path.glob(".pred.csv*"))


def test_layer_csv_dtype_the_hardware_cannot_run_names_the_row(models_dir, tmp_path, capsys):
    src = tmp_path / "shapes.csv"
    src.write_text("op,batch,in_features,out_features,direction,dtype\nlinear,32,512,256,forward,float32\nlinear,32,512,256,forward,bf16\n")
    out = tmp_path / "pred.csv"
    assert main(["predict", "layers", "--hardware", "T4", "--input", str(src), "--output", str(out), "--models", models_dir]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 2, column dtype (bf16)" in err and "--precision" not in err and not out.exists()
    # several such rows: all of them, as the table's other bad cells are (only the first was, 2026-12-07)
    src.write_text(src.read_text() + "linear,32,512,256,forward,fp32\nlinear,8,64,64,forward,bf16\n")
    assert main(["predict", "layers", "--hardware", "T4", "--input", str(src), "--output", str(out), "--models", models_dir]) == 2
    err = capsys.readouterr().err
    assert "row 2, column dtype (bf16)" in err and "row 4, column dtype (bf16)" in err and "give those rows another dtype" in err
    assert not out.exists()


def test_api_seq_len_is_the_clis(models_dir):
    kw = {"batch_size": 2, "hardware": "Tesla T4", "models_dir": models_dir, "overhead_ms": 0.0}
    a = predict_step_time("bert_base_like", seq_len=16, **kw)
    assert a.step_seconds == predict_step_time("bert_base_like", zoo_kwargs={"seq_len": 16}, **kw).step_seconds
    assert a.input_shape == [2, 16]
    with pytest.raises(PrenetError, match="disagree"):
        predict_step_time("bert_base_like", seq_len=16, zoo_kwargs={"seq_len": 32}, **kw)
    with pytest.raises(PrenetError, match="positive integer"):
        predict_step_time("bert_base_like", seq_len=0, **kw)


def test_api_predict_layers(models_dir):
    df = pl.DataFrame(
        {
            "op": ["relu", "layernorm"],
            "batch": ["64", "64"],
            "hidden": ["1024", "768"],
            "direction": ["forward", "train_step"],
            "dtype": ["float32", "float32"],
        }
    )
    out = predict_layers(df, hardware="local", models_dir=models_dir)
    assert out.columns[-1] == "predicted_ms" and out.height == 2
    with pytest.raises(PrenetError, match="lacks column"):
        predict_layers(df.drop("direction"), hardware="local", models_dir=models_dir)
    # an optimizer on a forward row has no step to act on: said, not silently dropped; a misspelt one is refused
    with pytest.warns(UserWarning, match=r"row\(s\) 1: an optimizer is given on a forward"):
        predict_layers(df.with_columns(pl.lit("adam").alias("optimizer")), hardware="local", models_dir=models_dir)
    with pytest.raises(PrenetError, match="row 1, column optimizer: 'adamm'"):
        predict_layers(df.with_columns(pl.Series("optimizer", ["adamm", "adam"])), hardware="local", models_dir=models_dir)


def test_layer_directions_are_consistent(models_dir):
    df = pl.DataFrame(
        {
            "op": ["conv2d"] * 3,
            "batch": ["8"] * 3,
            "in_channels": ["64"] * 3,
            "out_channels": ["64"] * 3,
            "kernel_size": ["3"] * 3,
            "input_size": ["32"] * 3,
            "stride": ["1"] * 3,
            "padding": ["1"] * 3,
            "direction": ["forward", "forward_backward", "train_step"],
            "dtype": ["float32"] * 3,
        }
    )
    for hw in ("local", "A100 40GB PCIe"):
        t = predict_layers(df, hardware=hw, models_dir=models_dir)["predicted_ms"].to_list()
        assert t[0] < t[1] <= t[2], (hw, t)


def test_cli_step_time_precision_and_unsupported_unit(models_dir, capsys):
    assert (
        main(
            [
                "predict",
                "step-time",
                "--model",
                "mlp",
                "--batch-size",
                "16",
                "--hardware",
                "H100 SXM5 80GB",
                "--precision",
                "bf16",
                "--models",
                models_dir,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "bf16" in out and "time by op family" in out and "input 16x784" in out
    assert (
        main(
            [
                "predict",
                "step-time",
                "--model",
                "mlp",
                "--batch-size",
                "16",
                "--hardware",
                "V100 PCIe 16/32GB",
                "--precision",
                "bf16",
                "--models",
                models_dir,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BF16" in err
    with pytest.raises(SystemExit) as e:
        main(["predict", "step-time", "--model", "mlp", "--batch-size", "16", "--precision", "fp8"])
    assert e.value.code == 2 and "fp32, tf32, fp16, bf16" in capsys.readouterr().err.replace("'", "")


def test_cli_step_time_zoo_arg_and_memory_warning(models_dir, capsys):
    """ResNet-50 at 224 px, batch 256, on a 16 GB T4: in FP32 its activations do not fit; under fp16 autocast, at 16 bits,
    they do (DeepLearningExamples trains it so, AMP at batch 256 on 16 GB V100s)."""
    answers = {}
    for precision in ("fp32", "fp16"):
        argv = ["predict", "step-time", "--model", "resnet50", "--zoo-arg", "image_size=224", "--batch-size", "256"]
        assert main([*argv, "--hardware", "Tesla T4", "--precision", precision, "--models", models_dir]) == 0
        answers[precision] = capsys.readouterr().out
    assert all("input 256x3x224x224" in out for out in answers.values())
    assert "DOES NOT FIT" in answers["fp32"] and "--precision fp16 (16-bit" in answers["fp32"]  # a T4 has no BF16
    assert "(fits)" in answers["fp16"]
    note = "Tesla T4 is power-limited (70 W: about 1230 of its 1590 MHz boost clock on dense math), but its own measured ops"
    assert note in answers["fp16"]


@pytest.mark.parametrize(
    "hardware, dtype, precision", [("H100 SXM5 80GB", "bfloat16", "bf16"), ("Tesla T4", "float16", "fp16"), ("local", "float32", "fp32")]
)
def test_one_op_one_answer_layer_table_and_step_time(models_dir, tmp_path, hardware, dtype, precision):
    """The same layer on the same hardware: ``predict layers`` (a forward linear row) equals that linear's forward ops
    inside a whole step (``predict step-time``'s path): its GEMM, plus under autocast the casts of its operands; also
    with a host cost per issued op, which belongs to a whole step, not to a layer's kernels."""
    import json
    import shutil

    import torch

    from prenet.api import _hardware
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import device_type, predict_trace

    models_dir = shutil.copytree(models_dir, tmp_path / "ops")
    manifest = json.loads((models_dir / "gpu" / "manifest.json").read_text())  # the GPU part holds the host cost
    (models_dir / "gpu" / "manifest.json").write_text(json.dumps({**manifest, "host_ms": {"gpu": 0.05}}))
    row = pl.DataFrame(
        {"op": ["linear"], "batch": ["64"], "in_features": ["512"], "out_features": ["256"], "direction": ["forward"], "dtype": [dtype]}
    )
    layer_ms = predict_layers(row, hardware=hardware, models_dir=models_dir)["predicted_ms"][0]
    hw = _hardware(hardware, 1)
    module = torch.nn.Sequential(torch.nn.Linear(512, 256))
    trace = trace_step(module, (torch.randn(64, 512), torch.randint(0, 256, (64,))), precision=precision, device_type=device_type(hw))
    _, ops = predict_trace(trace, hw, EfficiencyModel.load(models_dir))
    # the GEMM and the casts of its operands (input, weight, bias), not the cast of its output for the loss
    operands = pl.col("shapes").is_in(["64x512", "256x512", "256"])
    fwd = ops.filter((pl.col("phase") == "forward") & ((pl.col("family") == "gemm") | ((pl.col("family") == "copy") & operands)))
    assert fwd.filter(pl.col("family") == "gemm").height == 1
    assert float(fwd["predicted_ms"].sum()) == pytest.approx(layer_ms, rel=1e-9), fwd.select("op", "shapes", "predicted_ms")


def test_cli_fused_optimizer_is_one_kernel_in_the_answer(models_dir, capsys):
    """``--fused``: the answer names the fused optimizer, its JSON says so, and the step's optimizer phase is torch's one
    fused kernel, faster than the foreach kernels on the same GPU."""
    import json

    base = ["predict", "step-time", "--model", "gpt_sdpa", "--batch-size", "2", "--hardware", "H100 SXM5 80GB", "--optimizer", "adamw"]
    assert main([*base, "--precision", "bf16", "--models", models_dir, "--fused"]) == 0
    assert "adamw (fused)" in capsys.readouterr().out
    answers = {}
    for extra in ([], ["--fused"]):
        assert main([*base, "--models", models_dir, "--json", *extra]) == 0
        answers[bool(extra)] = json.loads(capsys.readouterr().out)
    assert answers[True]["fused"] and not answers[False]["fused"]
    assert answers[True]["family_ms"]["optimizer"] < answers[False]["family_ms"]["optimizer"]


def test_models_by_the_names_users_know(tmp_path):
    """``torchvision:NAME`` and ``hf:config.json`` build the published architectures on meta (parameter counts of
    torchvision's resnet50 and of gpt2-large), with 224² images and 512-token sequences by default; bad names, fields
    and sizes get one line."""
    from prenet.errors import PrenetError
    from prenet.paths import data_dir
    from prenet.user_models import build_model

    module, (x, _) = build_model("torchvision:resnet50", 2)
    assert sum(p.numel() for p in module.parameters()) == 25_557_032 and tuple(x.shape) == (2, 3, 224, 224)
    config = data_dir() / "external" / "neusight2025" / "model_configs" / "gpt2_large.json"
    module, (ids, _) = build_model(f"hf:{config}", 2)
    assert sum(p.numel() for p in module.parameters()) == 774_030_080 and tuple(ids.shape) == (2, 512)
    assert tuple(build_model(f"hf:{config}", 1, {"seq_len": 64})[1][0].shape) == (1, 64)
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["GPT2LMHeadModel"], "n_positions": 128}')
    for spec, sizes, message in [
        ("torchvision:resnet51", None, "closest: resnet50"),
        (f"hf:{bad}", None, "config field 'model_type' is missing"),
        (f"hf:{config}", {"seq_len": 4096}, "outside 1..1024"),
        ("hf:gtp2", None, "closest: gpt2"),
        ("hf:gpt2", {"n_layers": 2}, "no config field 'n_layers' \\(closest: n_layer\\)"),
    ]:
        with pytest.raises(PrenetError, match=message):
            build_model(spec, 1, sizes)


def test_gradient_accumulation_is_k_micro_steps_and_one_optimizer_step():
    """``grad_accum=K``: K forward+backward passes, K-1 gradient accumulations (one add per parameter) and one optimizer
    step; the epoch counts batch·K samples per step; K < 1 is refused."""
    import polars as pl

    from prenet import zoo
    from prenet.errors import PrenetError
    from prenet.hardware.catalog import get
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import accumulate, predict_step, predict_trace

    module, batch = build_on_meta(zoo.mlp, batch_size=16)
    model = EfficiencyModel(median_efficiency={"gpu": 0.5})
    hw = get("H100 SXM5 80GB")
    _, ops = predict_trace(trace_step(module, batch, optimizer="adam", device_type="cuda"), hw, model)
    micro = float(ops.filter(pl.col("phase") != "optimizer")["predicted_ms"].sum())
    opt = float(ops.filter(pl.col("phase") == "optimizer")["predicted_ms"].sum())
    one = predict_step(module, batch, hardware=hw, model=model, optimizer="adam", overhead_ms=0.0, dataset_size=1600)
    four = predict_step(module, batch, hardware=hw, model=model, optimizer="adam", overhead_ms=0.0, dataset_size=1600, grad_accum=4)
    assert four.grad_accum == 4 and four.steps_per_epoch == 25 and one.steps_per_epoch == 100
    extra = four.step_seconds * 1e3 - (4 * micro + opt)  # the three accumulations
    assert extra > 0 and one.step_seconds * 1e3 == pytest.approx(micro + opt)
    assert any("effective batch 64" in n for n in four.notes)
    with pytest.raises(PrenetError, match="grad-accum"):
        accumulate(trace_step(module, batch, device_type="cuda"), module, 0)


def test_activation_checkpointing_recomputes_blocks_and_saves_their_activations(models_dir, capsys):
    """``--checkpointing``: each layer of a transformer recomputes its forward in the backward pass (more ops, more
    time) and keeps only its input (less memory); a model without a repeated stack is refused in one line."""
    import json

    from prenet import zoo
    from prenet.checkpointing import checkpointed
    from prenet.memory.training import predict_training_memory, recompute_bytes
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step
    from prenet.paths import data_dir

    config = data_dir() / "external" / "neusight2025" / "model_configs" / "gpt2_large.json"
    base = [
        "predict",
        "step-time",
        "--model",
        f"hf:{config}",
        "--zoo-arg",
        "seq_len=1024",
        "--zoo-arg",
        "n_layer=4",  # GPT-2 large's blocks, 4 of its 36 (a 36-block meta trace twice took 12 s of make test)
        "--batch-size",
        "4",
        "--hardware",
        "L4",
        "--models",
        models_dir,
        "--json",
    ]
    answers = {}
    for extra in ([], ["--checkpointing"]):
        assert main([*base, *extra]) == 0
        answers[bool(extra)] = json.loads(capsys.readouterr().out)
    on, off = answers[True], answers[False]
    assert on["ops"] > off["ops"] and on["step_seconds"] > off["step_seconds"] and on["memory_bytes"] < off["memory_bytes"]
    assert any("4 blocks recompute" in n for n in on["notes"])
    module, batch = build_on_meta(zoo.gpt_sdpa, batch_size=2)
    ck, n = checkpointed(module)
    assert n == 4 and predict_training_memory(ck, batch).activations_bytes < predict_training_memory(module, batch).activations_bytes
    # the recomputed block's activations are live again during its backward: one block's worth, none unless checkpointed
    one_block = recompute_bytes(ck, batch)
    assert recompute_bytes(module, batch) == 0 and 0 < one_block < predict_training_memory(module, batch).activations_bytes / n

    def backward_gemm_flops(m):
        return sum(r.flops for r in trace_step(m, batch, device_type="cuda").records if r.phase == "backward" and r.family == "gemm")

    assert backward_gemm_flops(ck) > backward_gemm_flops(module)  # the blocks' forward GEMMs again
    with pytest.raises(PrenetError, match="no repeated stack"):
        checkpointed(build_on_meta(zoo.vgg16, batch_size=2)[0])


def test_checkpointing_under_mixed_precision_recomputes_in_the_same_precision():
    """bf16/fp16 meta traces of a checkpointed model: the recompute re-enters prenet's autocast (else torch's checkpoint
    finds recomputed tensors of other dtypes), recasting in the backward what the forward cast."""
    from prenet import zoo
    from prenet.checkpointing import checkpointed
    from prenet.meta_device import build_on_meta
    from prenet.ops import trace_step

    module, batch = build_on_meta(zoo.gpt_sdpa, batch_size=2, seq_len=16)
    ck, _ = checkpointed(module)
    for precision in ("bf16", "fp16"):
        records = trace_step(ck, batch, precision=precision, device_type="cuda").records
        assert any(r.phase == "backward" and r.op == "_to_copy" for r in records)


def test_memory_with_gradient_accumulation_keeps_every_gradient_live():
    from prenet import zoo
    from prenet.memory.training import predict_training_memory
    from prenet.meta_device import build_on_meta

    module, batch = build_on_meta(zoo.gpt_sdpa, batch_size=8)
    one, four = predict_training_memory(module, batch, "adamw"), predict_training_memory(module, batch, "adamw", grad_accum=4)
    assert four.backward_live_bytes == four.activations_bytes + four.gradients_bytes and four.total_bytes > one.total_bytes


def test_hf_configs_outside_the_rebuilt_subset_are_refused_and_torchvision_builds_real_weights(tmp_path):
    """Without transformers, an ``hf:`` config.json is rebuilt op for op (prenet.transformer_references): a config that
    would build another model is refused."""
    from prenet.user_models import _hf_config, build_model

    for config, field in [
        ({"architectures": ["OPTForCausalLM"], "hidden_size": 64, "do_layer_norm_before": False}, "do_layer_norm_before"),
        ({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_inner": 128}, "n_inner"),
        ({"architectures": ["BertForPreTraining"], "hidden_act": "relu"}, "hidden_act"),
    ]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        with pytest.raises(PrenetError, match=field):
            _hf_config(str(path), 1, {})
    module, _ = build_model("torchvision:resnet18", 1, {"image_size": 32, "classes": 10}, meta=False)
    assert next(module.parameters()).device.type == "cpu"  # a convergence forecast needs real weights


def test_cli_model_arg_and_seq_len_name_a_models_sizes(models_dir, capsys):
    """``--model-arg`` (``--zoo-arg``'s name since issue 31) and ``--seq-len`` reach the model builder; a disagreement
    between them is one line."""
    from prenet.paths import data_dir

    config = data_dir() / "external" / "neusight2025" / "model_configs" / "gpt2_large.json"
    base = ["predict", "step-time", "--batch-size", "1", "--hardware", "L4", "--models", models_dir, "--json"]
    assert main([*base, "--model", f"hf:{config}", "--seq-len", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [1, 64]
    assert main([*base, "--model", "resnet18", "--model-arg", "image_size=96"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [1, 3, 96, 96]
    assert main([*base, "--model", f"hf:{config}", "--seq-len", "64", "--model-arg", "seq_len=32"]) == 2
    assert "--seq-len 64 and --model-arg seq_len=32 disagree" in capsys.readouterr().err
    # a rate and a switch reach a library's builder as a number and a bool (timm's stochastic depth, torchvision's heads)
    assert main([*base, "--model", "timm:resnet18", "--model-arg", "drop_path_rate=0.1", "--model-arg", "image_size=64"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [1, 3, 64, 64]
    assert main([*base, "--model", "torchvision:googlenet", "--model-arg", "aux_logits=false", "--model-arg", "image_size=64"]) == 0
    capsys.readouterr()
    # a name reaches a transformers config field (OPT's default SDPA mask check reads a tensor's value: eager runs on meta)
    assert (
        main([*base, "--model", "hf:opt", "--model-arg", "_attn_implementation=eager", "--model-arg", "num_hidden_layers=2", "--seq-len", "64"]) == 0
    )
    capsys.readouterr()
    for arg, message in [("image_size=0", "must be positive"), ("drop_path_rate=0.1x", "an integer, a number, true/false or a name")]:
        assert main([*base, "--model", "timm:resnet18", "--model-arg", arg]) == 2
        assert message in capsys.readouterr().err


def test_a_grouped_convolution_on_tensor_cores_is_answered_at_memory_speed(models_dir):
    """On fp16/tf32 tensor cores a grouped convolution's narrow per-group GEMMs are memory-bound: it is answered by the
    elementwise model; on the FP32 units (a V100's: an A100 runs FP32 convolutions on TF32 by torch's defaults),
    compute-bound, by the conv model."""
    import torch

    from prenet.hardware import get
    from prenet.ops import trace_step
    from prenet.steptime.efficiency import EfficiencyModel
    from prenet.steptime.step import predict_trace

    model = EfficiencyModel.load(models_dir)
    module = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1, groups=16), torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 10))
    example = (torch.randn(8, 64, 8, 8), torch.randint(0, 10, (8,)))
    estimates = {}
    for precision, hw in (("fp16", get("A100 80GB SXM4")), ("fp32", get("V100 SXM2"))):
        _, ops = predict_trace(trace_step(module, example, precision=precision, device_type="cuda"), hw, model)
        estimates[precision] = set(ops.filter(pl.col("family") == "conv_grouped")["estimate"].to_list())
    assert estimates == {"fp16": {"analogy:elementwise"}, "fp32": {"analogy:conv"}}


@pytest.mark.parametrize("hardware, dtype", [("A100 80GB SXM4", "bf16"), ("H100 SXM5 80GB", "fp32"), ("local", "fp32")])
def test_a_gemm_is_never_answered_slower_than_the_same_gemm_with_more_rows(models_dir, hardware, dtype):
    from prenet.steptime.efficiency import GEMM_ENVELOPE, more_rows

    batches = [8, 16, 32, 64, 128, 256, 512]
    n = len(batches)
    table = pl.DataFrame(
        {"op": ["linear"] * n, "batch": [str(b) for b in batches], "in_features": ["1024"] * n, "out_features": ["4096"] * n}
        | {"direction": ["forward"] * n, "dtype": [dtype] * n}
    )
    ms = predict_layers(table, hardware=hardware, models_dir=models_dir)["predicted_ms"].to_list()
    # a finite grid: twice the rows bounds the smaller GEMM by the larger one's own trees' answer, while the larger one
    # may be lowered further by points past the smaller one's grid; so within a few percent, not exactly
    assert all(a <= b * 1.05 for a, b in zip(ms, ms[1:])), ms
    # the grid's GEMMs are the same op with more rows: FLOPs, output and bytes grow as the rows do
    one = pl.DataFrame({"m": [64], "n": [4096], "k": [1024], "batch": [1], "flops": [2 * 64 * 4096 * 1024], "out_numel": [64 * 4096]})
    one = one.with_columns(pl.lit("bfloat16").alias("dtype"), pl.lit(2 * (64 * 1024 + 1024 * 4096 + 64 * 4096)).alias("bytes"))
    twice = more_rows(one, 2).row(0, named=True)
    assert 2 in GEMM_ENVELOPE and twice["m"] == 128 and twice["flops"] == 2 * one["flops"][0] and twice["out_numel"] == 128 * 4096
    assert twice["bytes"] == 2 * (128 * 1024 + 1024 * 4096 + 128 * 4096)


def test_parallel_settings_that_change_nothing_are_said_so(models_dir):
    p = predict_step_time("mlp", batch_size=8, hardware="L4", parallel="fsdp", network_gbits=400, models_dir=models_dir)
    assert any("--parallel fsdp on one GPU shares nothing" in n for n in p.notes)
    assert any("one node uses none of it" in n for n in p.notes)


def test_a_local_answer_is_scaled_to_the_host_speed_a_probe_reads_now(models_dir, tmp_path, monkeypatch):
    """On this very CPU the default answer is put on the host's speed now: the probe's fastest of 5 against the expected
    fastest of 5 of the op benchmark's samples (in the CPU models' manifest) multiplies every op, module call and cache
    refetch alike, so a layer table and a step still give one op one time; within ±10 % it is read as the same speed;
    ``recorded`` (the pipeline's evaluations, and $PRENET_HOST_SPEED) answers as fitted; a GPU is never probed; an
    unknown mode is one line."""
    import json
    import shutil

    import prenet.host_speed as hs
    from prenet.errors import PrenetError
    from prenet.steptime.step import CPU_HOST_SPEED_NOTE

    ops_dir = shutil.copytree(models_dir, tmp_path / "ops")
    hw = _local_cpu(64.0)
    manifest = json.loads((ops_dir / "cpu" / "manifest.json").read_text())
    fitted = manifest["host_probes"][hw.hardware_id]  # train_ops keeps the op benchmark's probe samples (ms)
    assert fitted["threads"] == 1 and fitted["probe_ms"] and all(v > 0 for v in fitted["probe_ms"])
    probes = {hw.hardware_id: {"threads": 1, "probe_ms": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]}}
    (ops_dir / "cpu" / "manifest.json").write_text(json.dumps({**manifest, "host_probes": probes}))
    now = {"ms": (1.6, 1.5, 1.8, 1.7, 1.9)}
    monkeypatch.setattr(hs, "probes_now", lambda threads: now["ms"])
    monkeypatch.setenv(hs.ENV, "now")
    kw = dict(batch_size=16, hardware=hw, models_dir=ops_dir, overhead_ms=0.0)
    rec, slow = predict_step_time("mlp", host_speed="recorded", **kw), predict_step_time("mlp", **kw)
    factor = 1.5 / (1.0 * 5 / 6 + 1.1 / 6)  # then: the expected fastest of 5 of the 6 samples
    assert slow.step_seconds == pytest.approx(factor * rec.step_seconds, rel=1e-6)
    assert slow.family_ms == pytest.approx({k: factor * v for k, v in rec.family_ms.items()})
    assert [n for n in rec.notes if n.startswith("host speed:")] == [CPU_HOST_SPEED_NOTE]
    assert slow.host_speed["factor"] == pytest.approx(factor) and slow.host_speed["now_ms"] == 1.5 and rec.host_speed is None
    (note,) = [n for n in slow.notes if n.startswith("host speed:")]
    assert note.startswith(f"host speed: this CPU runs {factor:.2f}× slower now") and f"scaled by {factor:.2f}" in note
    row = pl.DataFrame(
        {"op": ["linear"], "batch": ["64"], "in_features": ["512"], "out_features": ["256"], "direction": ["forward"], "dtype": ["float32"]}
    )
    layer = {m: predict_layers(row, hardware=hw, models_dir=ops_dir, host_speed=m)["predicted_ms"][0] for m in ("now", "recorded")}
    assert layer["now"] == pytest.approx(factor * layer["recorded"], rel=1e-9)
    monkeypatch.setenv(hs.ENV, "recorded")  # the environment's setting is the default's
    assert predict_step_time("mlp", **kw).step_seconds == pytest.approx(rec.step_seconds, rel=1e-9)
    monkeypatch.setenv(hs.ENV, "now")
    now["ms"] = (1.1, 1.12, 1.2, 1.09, 1.3)  # 7 % slower than then: read as the same speed
    same = predict_step_time("mlp", **kw)
    assert same.step_seconds == pytest.approx(rec.step_seconds, rel=1e-9)
    assert any(n.startswith("host speed: this CPU runs at the speed its op benchmark had") for n in same.notes)
    gpu = predict_step_time("mlp", batch_size=16, hardware="Tesla T4", models_dir=ops_dir, overhead_ms=0.0)
    assert not [n for n in gpu.notes if n.startswith("host speed:")]
    with pytest.raises(PrenetError, match="not a host-speed mode; choose one of: now, recorded"):
        predict_step_time("mlp", host_speed="fast", **kw)
