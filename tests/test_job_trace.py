"""A named job's traced step and memory estimate are stored, read back unchanged and keyed by all that shapes them;
a repeated question is answered without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prenet.paths import data_dir
from prenet.steptime import job_trace as jt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("PRENET_TRACE_CACHE", "on")
    monkeypatch.setenv("PRENET_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "traces"


def test_a_stored_job_reads_back_as_the_trace_and_memory_made_now(store):
    kw = {"device_types": ["cpu", "cuda"], "optimizer": "adam", "precision": "bf16", "grad_accum": 2}
    made = jt.job_trace("mlp", 8, **kw)
    read = jt.job_trace("mlp", 8, **kw)
    assert not made.stored and read.stored and len(list(store.glob("*.json"))) == 3  # two traces and the memory
    for dt in ("cpu", "cuda"):
        assert read.traces[dt] == made.traces[dt] and read.traces[dt].frame().equals(made.traces[dt].frame())
    assert read.memory == made.memory and read.memory.total_bytes > 0
    assert any("read from the trace store" in n for n in jt.job_notes(read))
    # another precision, batch or optimizer is another job; an FP32 CPU-only question reuses the stored CPU trace and
    # memory, while a BF16 one traces its memory again under the CPU's autocast lists
    fp32 = jt.job_trace("mlp", 8, **{**kw, "precision": "fp32"})
    # batch 8 through 2.9 M parameters: autocast's 16-bit weight copies (2 bytes a weight) outweigh the halved activations
    assert not fp32.stored and fp32.memory.activations_bytes < made.memory.activations_bytes
    assert fp32.memory.weights_bytes == made.memory.weights_bytes  # FP32 master weights either way
    assert not jt.job_trace("mlp", 16, **kw).stored
    assert jt.job_trace("mlp", 8, **{**kw, "precision": "fp32", "device_types": ["cpu"]}).stored
    assert not jt.job_trace("mlp", 8, **{**kw, "device_types": ["cpu"]}).stored


def test_the_key_follows_a_config_files_contents_and_user_code_is_never_stored(store, tmp_path):
    src = data_dir() / "external" / "neusight2025" / "model_configs" / "gpt2_large.json"
    cfg = tmp_path / "gpt2.json"
    cfg.write_text(src.read_text())
    key = jt.job_key(f"hf:{cfg}", 2, None, precision="fp32")
    cfg.write_text(json.dumps({**json.loads(src.read_text()), "n_layer": 2}))
    assert jt.job_key(f"hf:{cfg}", 2, None, precision="fp32") != key
    assert jt.job_key("mlp", 2, None, precision="fp32") != jt.job_key("mlp", 2, None, precision="bf16")
    assert jt.storable("torchvision:resnet50") and jt.storable("timm:convnext_tiny") and jt.storable("gpt_sdpa")
    assert not jt.storable("models/my.py:build")
    assert jt.job_key("timm:convnext_tiny", 8, None) != jt.job_key("torchvision:convnext_tiny", 8, None)


def test_a_zoo_model_says_which_defaults_it_kept_stored_or_not(store):
    made = jt.job_trace("bert_base_like", 2, device_types=["cuda"], zoo_kwargs={"seq_len": 128})
    read = jt.job_trace("bert_base_like", 2, device_types=["cuda"], zoo_kwargs={"seq_len": 128})
    assert read.stored and read.model_note == made.model_note and made.model_note in jt.job_notes(read)
    assert "layers=2" in made.model_note and "seq_len" not in made.model_note and "hf:bert" in made.model_note
    full = {"image_size": 224, "classes": 1000}
    assert jt.job_trace("resnet50", 2, device_types=["cuda"], zoo_kwargs=full, with_memory=False).model_note == ""


def test_the_store_can_be_turned_off(store, monkeypatch):
    monkeypatch.setenv("PRENET_TRACE_CACHE", "off")
    jt.job_trace("mlp", 4, device_types=["cpu"])
    assert not jt.job_trace("mlp", 4, device_types=["cpu"]).stored and not store.exists()


def test_a_repeated_question_imports_no_torch(store, tiny_pipeline):
    """The second answer about a job (in a new process, as a CLI call is) reads its stored trace: the same answer, and
    torch is never imported."""
    models = tiny_pipeline("train_gpu_ops", "train_ops")[1].paths.models_ops
    code = (
        "import sys, json; from prenet.api import predict_step_time; "
        f"p = predict_step_time('mlp', batch_size=8, hardware='H100 SXM5 80GB', models_dir={str(models)!r}, with_memory=True); "
        "print(json.dumps([p.step_seconds, p.memory_bytes, 'torch' in sys.modules]))"
    )
    first, second = (
        json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout) for _ in range(2)
    )
    assert first[:2] == second[:2] and first[2] is True and second[2] is False


def test_nothing_stale_or_foreign_is_stored_or_trusted(store, monkeypatch):
    """User code is never stored (a path with a colon included); a trace made after prenet's files changed under the
    process is not stored; an entry of another shape is a miss, traced again."""
    assert not jt.storable("C:/work/net.py:build") and not jt.storable("mlp", {"act": object()})
    monkeypatch.setattr(jt, "_source_fingerprint", lambda: "edited since import")
    jt.job_trace("mlp", 4, device_types=["cpu"])
    assert not store.exists() or not list(store.glob("*.json"))
    monkeypatch.undo()
    monkeypatch.setenv("PRENET_TRACE_CACHE", "on")
    monkeypatch.setenv("PRENET_CACHE_DIR", str(store.parent))
    jt.job_trace("mlp", 4, device_types=["cpu"])
    for f in store.glob("*.json"):
        f.write_text(json.dumps({"format": jt.FORMAT, "trace": {"records": {}}, "memory": {"weights_bytes": 1}, "blocks": 0}))
    again = jt.job_trace("mlp", 4, device_types=["cpu"])
    assert not again.stored and again.traces["cpu"].records
