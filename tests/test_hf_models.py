"""``hf:MODEL_TYPE`` and ``hf:config.json`` are built by transformers itself on ``meta`` (prenet/hf_models.py): the
published parameter counts, no weight memory, and the same step-time answer as prenet's op-for-op rebuilds of GPT-2,
OPT and BERT (issue 31, item 6)."""

from __future__ import annotations

import json

import pytest
import torch

from prenet.hf_models import hf_model
from prenet.user_models import build_model


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_model_types_build_the_published_architectures_on_meta():
    module, (ids, labels) = build_model("hf:gpt2", 2)
    assert _params(module) == 124_439_808 and tuple(ids.shape) == (2, 512) and tuple(labels.shape) == (1024,)
    assert next(module.parameters()).device.type == "meta"
    llama, (ids, _) = build_model("hf:llama", 1, {"seq_len": 2048})  # transformers' default: Llama-2-7B's shape
    assert _params(llama) == 6_738_415_616 and tuple(ids.shape) == (1, 2048)
    small, _ = hf_model("gpt2", 1, {"n_layer": 2, "seq_len": 8})
    assert _params(small) == 124_439_808 - 10 * 7_087_872  # ten fewer GPT-2 blocks of 7.09 M parameters
    logits = small(torch.ones(1, 8, dtype=torch.long, device="meta"))
    assert tuple(logits.shape) == (8, 50257)


def test_vision_and_encoder_decoder_configs_build_and_trace_on_meta():
    """A vision config (ViT) is its image classifier on images of its size against its classes; an encoder-decoder (T5)
    takes the ids as its decoder's input too; both trace with every op in a family."""
    from prenet.ops import trace_step

    vit, (pixels, labels) = build_model("hf:vit", 2, {"num_hidden_layers": 2})
    assert type(vit.vision).__name__ == "ViTForImageClassification" and tuple(pixels.shape) == (2, 3, 224, 224) and tuple(labels.shape) == (2,)
    t5, (ids, _) = build_model("hf:t5", 2, {"num_layers": 1, "num_decoder_layers": 1, "seq_len": 16})
    for module, example in ((vit, (pixels, labels)), (t5, (ids, ids.flatten()))):
        trace = trace_step(module, example, precision="bf16", device_type="cuda")
        assert trace.records and not [r.op for r in trace.records if r.family == "other"]


def test_vision_configs_without_an_image_size_or_with_a_vocabulary_are_image_classifiers():
    """transformers' image-classification mapping says which configs are vision models: BEiT (which has a visual
    vocabulary), DeiT (two heads listed: the plain one) and the convolutional ResNet, which has no image size and is
    given ImageNet's 224² unless ``image_size`` is stated."""
    from prenet.hf_models import DEFAULT_IMAGE_SIZE

    for spec, arch in (("hf:beit", "BeitForImageClassification"), ("hf:deit", "DeiTForImageClassification")):
        module, _ = build_model(spec, 1, {"num_hidden_layers": 1})
        assert type(module.vision).__name__ == arch
    resnet, (pixels, labels) = build_model("hf:resnet", 2)
    assert type(resnet.vision).__name__ == "ResNetForImageClassification"
    assert tuple(pixels.shape) == (2, 3, DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE) and tuple(labels.shape) == (2,)
    _, (small, _) = build_model("hf:resnet", 2, {"image_size": 64})
    assert tuple(small.shape) == (2, 3, 64, 64)
    assert tuple(resnet(pixels).shape) == (2, resnet.vision.config.num_labels)


def test_a_model_that_checks_its_ids_for_padding_traces_on_meta():
    """DeBERTa-v2 reads its ids' values when given no attention mask (transformers' padding warning, an ``.item()``),
    which failed on meta: that check only warns, and is skipped; the step traces with every op in a family."""
    from prenet.ops import trace_step

    module, (ids, labels) = build_model("hf:deberta-v2", 2, {"num_hidden_layers": 1, "seq_len": 16})
    assert type(module.lm).__name__ == "DebertaV2ForMaskedLM"
    trace = trace_step(module, (ids, labels), precision="bf16", device_type="cuda")
    assert trace.records and not [r.op for r in trace.records if r.family == "other"]


def test_a_config_json_is_read_by_transformers(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertForPreTraining"], "num_hidden_layers": 2, "max_position_embeddings": 128})
    )
    module, (ids, _) = build_model(f"hf:{path}", 3)
    assert type(module.lm).__name__ == "BertForPreTraining" and tuple(ids.shape) == (3, 128)
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": "big"}))  # a field of the wrong type: one line, named
    from prenet.errors import PrenetError

    with pytest.raises(PrenetError, match="transformers cannot read this config: .*'hidden_size'") as err:
        build_model(f"hf:{path}", 1)
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def models_dir(tiny_pipeline):
    return tiny_pipeline("train_gpu_ops", "train_ops")[1].paths.models_ops


@pytest.mark.parametrize(
    ("model_type", "arch", "auto"),
    [
        ("gpt2", "GPT2LMHeadModel", "AutoModelForCausalLM"),
        ("bert", "BertForPreTraining", "AutoModelForPreTraining"),
        ("opt", "OPTForCausalLM", "AutoModelForCausalLM"),
    ],
)
def test_transformers_and_the_rebuilt_model_give_the_same_step(models_dir, model_type, arch, auto):
    """Same ops, same answer: transformers' model in eager attention (as the rebuilds run) within 2 % of the rebuild."""
    from prenet.hf_models import import_transformers, transformers_major

    transformers = import_transformers()

    from prenet.api import predict_step_time
    from prenet.transformer_references import from_config

    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=2)
    config._attn_implementation = "eager"
    with torch.device("meta"):
        from prenet.hf_models import LMLogits

        hf = LMLogits(getattr(transformers, auto).from_config(config))
        ids = torch.ones(2, 128, dtype=torch.long)
        rebuilt = from_config({**config.to_dict(), "architectures": [arch]}, batch_size=2, seq_len=128, transformers=transformers_major())
    kw = {"batch_size": 2, "hardware": "A100 80GB PCIe", "optimizer": "adam", "precision": "fp32", "models_dir": models_dir}
    a = predict_step_time((hf, (ids, ids.flatten())), **kw)
    b = predict_step_time(rebuilt, **kw)
    assert a.params == b.params
    assert a.step_seconds == pytest.approx(b.step_seconds, rel=0.02)


def test_a_mixture_of_experts_traces_its_grouped_gemms_in_bf16(models_dir):
    """transformers' Mixtral runs its experts as ``torch._grouped_mm`` (BF16 only): under bf16 the trace casts its
    operands as autocast does, and each grouped GEMM counts 2 × tokens × top-k × in × out FLOPs (forward, and the input
    and weight gradients); the FP32 memory trace cannot run it, so the activations are traced in BF16, counted at FP32
    size, and the answer says so."""
    from prenet.api import predict_step_time
    from prenet.ops import trace_step

    module, (ids, labels) = build_model("hf:mixtral", 1, {"num_hidden_layers": 1, "seq_len": 16})
    trace = trace_step(module, (ids, labels), precision="bf16", device_type="cuda")
    grouped = [r for r in trace.records if r.op == "_grouped_mm"]
    rows, hidden, ffn = 16 * 2, 4096, 14336  # 16 tokens × top-2 experts; Mixtral-8x7B's widths
    assert {r.family for r in grouped} == {"gemm"} and {r.unit for r in grouped} == {"bf16"}
    assert sorted(r.flops for r in grouped if r.phase == "forward") == [2 * rows * ffn * hidden, 2 * rows * hidden * 2 * ffn]
    assert len([r for r in grouped if r.phase == "backward"]) == 4 and not [r.op for r in trace.records if r.family == "other"]
    p = predict_step_time(
        "hf:mixtral",
        batch_size=1,
        hardware="H100",
        precision="bf16",
        zoo_kwargs={"num_hidden_layers": 1, "seq_len": 16},
        with_memory=True,
        models_dir=models_dir,
    )
    params = sum(q.numel() for q in module.parameters())
    assert p.memory_bytes > 8 * params  # FP32 weights and gradients at least
    assert any(n.startswith("peak memory: its FP32 forward cannot run on meta") and "traced in BF16" in n for n in p.notes)


def test_a_stored_memory_estimate_keeps_the_line_on_how_it_was_traced(tmp_path, monkeypatch):
    """A job read back from the trace store says what the traced one said: Mixtral's activations were traced in BF16."""
    from prenet.steptime.job_trace import job_trace

    monkeypatch.setenv("PRENET_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PRENET_TRACE_CACHE", "on")
    kw = {"zoo_kwargs": {"num_hidden_layers": 1, "seq_len": 16}, "precision": "bf16", "device_types": ("cuda",)}
    first, again = job_trace("hf:mixtral", 1, **kw), job_trace("hf:mixtral", 1, **kw)
    assert not first.stored and again.stored and again.memory == first.memory
    assert again.memory_note == first.memory_note and "traced in BF16" in again.memory_note


def test_an_encoder_decoder_built_as_its_decoder_alone_says_so():
    from prenet.hf_models import hf_model

    whisper, _ = hf_model("whisper", 1, {"seq_len": 16})
    assert "encoder-decoder model, built as WhisperForCausalLM: its decoder alone" in whisper.prenet_note
    t5, _ = hf_model("t5", 1, {"seq_len": 16})  # the whole encoder-decoder: nothing to say
    assert not hasattr(t5, "prenet_note")


def test_models_hf_lists_the_types_that_answer_and_says_why_others_fail(tmp_path, monkeypatch, capsys):
    """``prenet models hf`` lists the types the last check (scripts/check_hf_models.py) answered for; ``--all`` every
    type, each failing one with its reason; a check made with another transformers version lists all and says so."""
    import transformers

    import prenet.hf_buildable as hb
    from pipeline.cli import main

    record = tmp_path / "buildable.json"
    monkeypatch.setattr(hb, "record_path", lambda: record)
    base = {"checked": "2026-12-05", "answers": ["bert", "mixtral"], "notes": {"mixtral": "answers in bf16 only"}, "fails": {"bark": "needs audio"}}
    record.write_text(json.dumps({**base, "transformers": transformers.__version__, "torch": torch.__version__}))
    assert main(["models", "hf", "[bm]*"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == ["hf:bert", "hf:mixtral\tanswers in bf16 only"] and "answer" in err and "--all" in err
    assert main(["models", "hf", "b[ae]r[kt]", "--all"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == ["hf:bark\tfails: needs audio", "hf:bart\tfails: not in the check", "hf:bert"]
    assert main(["models", "hf", "--all", "b[ae]r[kt]"]) == 0  # the flag before the pattern reads the same
    assert capsys.readouterr().out.splitlines() == ["hf:bark\tfails: needs audio", "hf:bart\tfails: not in the check", "hf:bert"]
    record.write_text(json.dumps({**base, "transformers": "0.0.1", "torch": torch.__version__}))
    assert main(["models", "hf", "b[ae]r[kt]"]) == 0
    out, err = capsys.readouterr()
    assert (
        out.split() == ["hf:bark", "hf:bart", "hf:bert"] and "not checked with these versions (the check on record ran with transformers 0.0.1" in err
    )
    # another torch release changes what traces; another build of the same release (+cpu, +cu121) does not
    release = torch.__version__.split("+")[0]
    record.write_text(json.dumps({**base, "transformers": transformers.__version__, "torch": "1.0.0"}))
    assert main(["models", "hf", "b[ae]r[kt]"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["hf:bark", "hf:bart", "hf:bert"] and f"ran with torch 1.0.0, this is {torch.__version__}" in err
    record.write_text(json.dumps({**base, "transformers": transformers.__version__, "torch": release + "+cu999"}))
    assert main(["models", "hf", "b[ae]r[kt]"]) == 0
    assert capsys.readouterr().out.split() == ["hf:bert"]


def test_the_shipped_check_is_of_the_pinned_transformers_and_holds_the_common_types():
    """data/hf/buildable.json must be rerun when the transformers pin moves (python scripts/check_hf_models.py)."""
    import transformers

    from prenet.hf_buildable import load_check

    check = load_check()
    assert check is not None and check.applies_to(transformers.__version__, torch.__version__)
    assert {"bert", "gpt2", "llama", "t5", "vit", "mixtral"} <= check.answers and not check.answers & set(check.fails)
    assert len(check.answers) + len(check.fails) == len(list(transformers.CONFIG_MAPPING.keys()))


@pytest.mark.parametrize(
    "model_type, says",
    [
        ("dbrx", r"^transformers could not build hf:dbrx \(AttributeError: .*rope_theta.*\); its default config may be incomplete"),
        ("dinat", r"^transformers could not build hf:dinat: it needs a package prenet does not install \(.*natten"),
    ],
)
def test_a_type_transformers_cannot_build_is_one_line_saying_what_to_give(model_type, says):
    from prenet.errors import PrenetError

    with pytest.raises(PrenetError, match=says):
        build_model(f"hf:{model_type}", 1)


def test_a_mixture_of_experts_asked_in_fp32_is_told_to_ask_in_bf16():
    from prenet.errors import PrenetError
    from prenet.ops import trace_step

    module, example = build_model("hf:mixtral", 1, {"num_hidden_layers": 1, "seq_len": 16})
    with pytest.raises(PrenetError, match=r"torch._grouped_mm\) run in BF16 only: ask with --precision bf16$"):
        trace_step(module, example, precision="fp32", device_type="cuda")


def test_a_config_field_that_breaks_the_build_is_named():
    from prenet.errors import PrenetError

    with pytest.raises(PrenetError, match=r"^transformers could not build hf:bert with the config fields given \(num_hidden_layers\): "):
        build_model("hf:bert", 1, {"num_hidden_layers": "two", "seq_len": 8})
