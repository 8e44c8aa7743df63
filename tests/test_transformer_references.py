"""Hugging Face transformers rebuilt in torch.nn from config.json, and the whole-model check against NeuSight's measured
transformer training steps."""

import json

import polars as pl
import pytest
import torch

from prenet.ops import trace_step
from prenet.paths import data_dir
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.reference_evaluation import load_neusight_e2e_rows, neusight_summary, neusight_whole_model
from prenet.transformer_references import from_config

CONFIGS = data_dir() / "external" / "neusight2025" / "model_configs"


@pytest.mark.parametrize(
    "name, params",
    # the published checkpoints' counts: bert-large BertForPreTraining, gpt2-large, facebook/opt-1.3b
    [("bert_large", 336_226_108), ("gpt2_large", 774_030_080), ("opt_13", 1_315_758_080)],
)
def test_rebuilt_transformers_have_the_published_parameter_counts(name, params):
    with torch.device("meta"):
        module, (ids, labels) = from_config(json.loads((CONFIGS / f"{name}.json").read_text()), batch_size=2, seq_len=16)
    assert sum(p.numel() for p in module.parameters()) == params
    assert tuple(ids.shape) == (2, 16) and tuple(labels.shape) == (32,)


def test_rebuilt_transformers_run_their_sources_ops():
    """GPT-2: Conv1D addmm, the causal torch.where, the tanh GELU; OPT: bmm attention; BERT: exact GELU (erf)."""
    ops = {}
    for name in ("gpt2_large", "opt_13", "bert_large"):
        config = json.loads((CONFIGS / f"{name}.json").read_text()) | {"n_layer": 1, "num_hidden_layers": 1}
        with torch.device("meta"):
            module, batch = from_config(config, batch_size=1, seq_len=8)
        ops[name] = {r.op for r in trace_step(module, batch, device_type="cuda").records}
    assert {"addmm", "where", "tanh"} <= ops["gpt2_large"] and "bmm" in ops["opt_13"] and "gelu" in ops["bert_large"]
    with pytest.raises(KeyError, match="GPT2LMHeadModel"):
        from_config({"architectures": ["T5Model"]}, batch_size=1, seq_len=8)


def test_neusight_rows_are_fp32_training_steps_of_the_rebuilt_models():
    rows = load_neusight_e2e_rows()
    assert set(rows["hardware_id"]) == {"H100 SXM5 80GB", "L4", "A100 80GB PCIe", "V100 PCIe 16/32GB"}
    assert rows.filter(~pl.col("gpu_seen")).height == 19  # SwitchTransformers (MoE) is not rebuilt
    r = rows.filter((pl.col("model") == "bert_large") & (pl.col("batch") == 2) & (pl.col("hardware_id") == "L4")).row(0, named=True)
    assert r["measured_ms"] == pytest.approx(316.30, abs=0.01) and r["seq_len"] == 512


def test_neusight_check_times_what_neusight_timed():
    """Every row predicted through the step path (forward without the loss, backward with it, gradient accumulation,
    no optimizer), NeuSight's own error beside it, summarised apart for the GPU its op models saw (V100)."""
    rows = load_neusight_e2e_rows().filter((pl.col("model") == "bert_large") & (pl.col("batch") == 2))
    df = neusight_whole_model(EfficiencyModel(median_efficiency={"gpu": 0.5}), rows)  # no trees: roofline ÷ 0.5
    assert df.height == rows.height and (df["predicted_ms"] > 0).all() and (df["neusight_ape_pct"] >= 0).all()
    s = neusight_summary(df)
    assert s["unseen_fp32"]["n"] == 3 and s["seen_fp32"]["n"] == 1 and set(s["per_gpu"]) == {"H100 SXM5 80GB", "L4", "A100 80GB PCIe"}


@pytest.mark.parametrize("name", ["gpt2_large", "opt_13", "bert_large"])
def test_a_layer_replicated_trace_equals_the_full_trace(name):
    """The NeuSight check traces 2 layers and replicates the second: same ops, FLOPs and bytes as the full trace (here
    at 4 layers and a short sequence), the optimizer phase apart."""
    from collections import Counter

    from prenet.steptime.reference_evaluation import layer_replicated_trace

    config = json.loads((CONFIGS / f"{name}.json").read_text())
    key = "n_layer" if "n_layer" in config else "num_hidden_layers"
    config[key] = 4
    with torch.device("meta"):
        module, batch = from_config(config, batch_size=1, seq_len=16)

    def bag(records):
        return Counter((r.op, r.phase, r.flops, r.bytes) for r in records if r.phase != "optimizer")

    assert bag(layer_replicated_trace(config, 1, 16).records) == bag(trace_step(module, batch, device_type="cuda").records)
