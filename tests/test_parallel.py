"""Multi-GPU steps (prenet/parallel): collectives by algorithm and their fit, DDP buckets and overlap, FSDP memory,
the learned residual, and the CLI's answers and one-line errors."""

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
from prenet.errors import PrenetError
from prenet.hardware.catalog import get
from prenet.parallel.collectives import PRIOR, CollectiveModel, LinkFit, fit_link, ring_terms
from prenet.parallel.data_parallel import (
    DDP_BUCKET,
    DDP_FIRST_BUCKET,
    GRAD_BYTES,
    Layout,
    OneGpuStep,
    check_layout,
    ddp_buckets,
    ddp_step,
    grad_ready_ms,
    parse_parallel,
)
from prenet.parallel.interconnect import ASSUMED, interconnect
from prenet.parallel.measured import measured_collectives
from prenet.parallel.memory import ddp_memory_bytes, fsdp_memory_bytes
from prenet.parallel.model import ParallelModel, SyncResidual, sync_growth
from prenet.parallel.residual import fit_residual, leave_one_model_out
from prenet.paths import data_dir

A100, RTX4090 = get("A100 80GB SXM4"), get("RTX 4090")


def test_ring_terms_and_hierarchy():
    assert ring_terms("all_reduce", 8) == (14, 2 * 7 / 8) and ring_terms("all_gather", 4) == (3, 0.75) and ring_terms("reduce_scatter", 1) == (0, 0.0)
    m = CollectiveModel(dict(PRIOR))
    ic = interconnect(A100)
    one = m.time_ms("all_reduce", 100e6, ic, 8)
    assert m.time_ms("all_reduce", 200e6, ic, 8) > one > m.time_ms("all_reduce", 100e6, ic, 2) > 0
    # 2 nodes of 8 over a 100 Gb/s network: the network dominates
    assert m.time_ms("all_reduce", 100e6, ic, 8, nodes=2, network_gbits=100) > 5 * one
    with pytest.raises(PrenetError, match="--network"):
        m.time_ms("all_reduce", 1e6, ic, 8, nodes=2)


def _generated(truth: LinkFit, ns: tuple[int, ...], nvls: bool) -> pl.DataFrame:
    rows = []
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for n in ns:
            for size in np.geomspace(1e3, 1e9, 13):
                spec_us = ring_terms(op, n)[1] * size / 300e3
                rows.append(
                    {"op": op, "n": n, "size_bytes": size, "link_gbps": 300.0, "nvls": nvls, "measured_us": truth.time_us(op, n, spec_us, nvls)}
                )
    return pl.DataFrame(rows)


def test_fit_link_recovers_the_constants_it_was_generated_with():
    truth = LinkFit(latency_us=15.0, step_us=1.5, eff_reduce=0.8, eff_gather=0.65, ramp=3.0, fill=0.7)
    rows = _generated(truth, (2, 4, 8), nvls=False)
    got = fit_link(rows)
    assert got.rows == rows.height and got.eff_nvls == 0.0  # no switch that reduces: NVLS is not fitted
    for f in ("latency_us", "step_us", "eff_reduce", "eff_gather", "ramp", "fill"):
        assert getattr(got, f) == pytest.approx(getattr(truth, f), rel=0.02), f


def test_nvls_all_reduce_keeps_a_flat_latency_where_the_ring_grows_and_is_fitted_from_switch_rows():
    truth = LinkFit(latency_us=15.0, step_us=1.2, eff_reduce=0.75, eff_gather=0.8, ramp=3.0, fill=0.6, nvls_step_us=7.0, eff_nvls=0.48)
    small = 4096 * ring_terms("all_reduce", 64)[1] / 300e3
    ring_only = truth.time_us("all_reduce", 64, small, nvls=False)
    assert ring_only == pytest.approx(15.0 + 1.2 * 126, rel=0.05)  # 126 ring steps
    assert truth.time_us("all_reduce", 64, small, nvls=True) == pytest.approx(15.0 + 7.0 * 6, rel=0.05)  # log₂ 64
    assert truth.time_us("all_gather", 64, small, nvls=True) == truth.time_us("all_gather", 64, small, nvls=False)
    got = fit_link(_generated(truth, (2, 4, 8, 16, 32, 64), nvls=True))
    for f in ("latency_us", "step_us", "eff_reduce", "eff_gather", "nvls_step_us", "eff_nvls"):
        assert getattr(got, f) == pytest.approx(getattr(truth, f), rel=0.05), f


def test_measured_collectives_hold_both_sources_on_their_links():
    d = measured_collectives(Path(data_dir()))
    by = {r["source"]: r for r in d.group_by("source").agg(pl.col("link").unique(), pl.len()).iter_rows(named=True)}
    assert sorted(by["deepbench"]["link"]) == ["pcie", "pcie_host"] and by["xla"]["link"] == ["nvlink"] and by["xla"]["len"] > 1000
    staged = d.filter(pl.col("link") == "pcie_host")
    assert staged["link_gbps"].max() == pytest.approx(d.filter(pl.col("link") == "pcie")["link_gbps"].max() / 2)
    assert d["measured_us"].min() > 0 and d["key"].n_unique() == d.height
    assert d.filter(pl.col("source") == "xla")["nvls"].all() and not d.filter(pl.col("source") == "deepbench")["nvls"].any()


def test_interconnects_from_the_catalog_and_assumed():
    assert interconnect(A100).link == "nvlink" and interconnect(A100).intra_gbps == 300 and not interconnect(A100).nvls
    assert interconnect(get("H100 SXM5 80GB")).nvls  # HGX H100's third-generation NVSwitch reduces in the switch
    ic = interconnect(RTX4090)
    assert ic.link == "pcie_host" and ic.intra_gbps == pytest.approx(ic.pcie_gbps / 2)
    assert interconnect(get("GTX 1080 Ti")) is ASSUMED
    notes = check_layout(Layout(gpus=2), ASSUMED, "GTX 1080 Ti")
    assert any("PCIe 3.0 x16 with peer-to-peer was assumed" in n for n in notes)
    with pytest.raises(PrenetError, match="holds at most 8 GPUs; use --gpus 8 --nodes 2"):
        check_layout(Layout(gpus=16), interconnect(A100), A100.hardware_id)
    with pytest.raises(PrenetError, match="does not divide the model's 12 attention heads"):
        check_layout(Layout(gpus=8, strategy="tp", tp=8), interconnect(A100), A100.hardware_id, heads=12)
    with pytest.raises(PrenetError, match="not one of ddp, fsdp"):
        parse_parallel("zero")
    assert parse_parallel("tp:4") == ("tp", 4) and parse_parallel("fsdp") == ("fsdp", 1)


def test_ddp_buckets_close_once_they_reach_ddps_caps():
    """As torch's _compute_bucket_assignment_by_size: append, close at ≥ the cap (1 MiB first, then 25 MiB)."""
    mib = 2**20 // GRAD_BYTES  # elements per MiB of gradient
    numels = [2 * mib, 10 * mib, 10 * mib, 10 * mib, mib // 2]
    assert ddp_buckets(numels) == [[4, 3], [2, 1, 0]]  # reverse registration order
    assert ddp_buckets(numels, order=[0, 4, 1, 2, 3]) == [[0], [4, 1, 2, 3]]  # the order gradients became ready
    assert DDP_FIRST_BUCKET == 2**20 and DDP_BUCKET == 25 * 2**20


def _mlp_ops():
    from prenet.ops.trace import trace_step

    m = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    tr = trace_step(m, (torch.randn(32, 256), torch.randint(0, 10, (32,))), device_type="cuda")
    ops = tr.frame().with_columns(pl.lit(0.1).alias("predicted_ms"))
    return tr, ops


def test_gradients_are_ready_in_backward_order_and_ddp_hides_what_overlaps():
    tr, ops = _mlp_ops()
    assert [m for m, _ in tr.grad_params] == ["0", "0", "2", "2", "4", "4"]
    ready = grad_ready_ms(ops, tr.grad_params)
    assert ready[4] < ready[2] < ready[0]  # the last layer's gradient is formed first
    model = ParallelModel(CollectiveModel(dict(PRIOR)), SyncResidual({}))
    step_ms = float(ops["predicted_ms"].sum())
    one = OneGpuStep(ops, tr.grad_params, tr.params, step_ms, "fp32")
    fast = ddp_step(one, Layout(gpus=8), interconnect(A100), model)
    slow = ddp_step(one, Layout(gpus=8), interconnect(RTX4090), model)
    assert 0 < fast.comm_ms < slow.comm_ms and 0 <= fast.exposed_ms <= fast.comm_ms and slow.exposed_ms > fast.exposed_ms
    assert slow.step_ms == pytest.approx(step_ms + slow.exposed_ms) and 0 <= slow.hidden_share <= 1
    single = ddp_step(one, Layout(gpus=1), interconnect(A100), model)
    assert single.comm_ms == 0 and single.step_ms == step_ms


def test_fsdp_shards_model_state_as_zero3_counts_it():
    psi = 7_500_000_000  # ZeRO's 7.5 B example: (2 + 2 + 12) Ψ / 64 in mixed-precision Adam = FP32 4 + 4 + 8 under autocast
    assert fsdp_memory_bytes(16 * psi, 4 * psi, 4 * psi, 8 * psi, 64, units=10**12) == pytest.approx(16 * psi / 64, rel=1e-6)
    assert ddp_memory_bytes(10, 4) == 14  # DDP's buckets: a copy of the gradients
    w, g, o = 4 * 10**9, 4 * 10**9, 8 * 10**9
    total = w + g + o + 5 * 10**9
    assert fsdp_memory_bytes(total, w, g, o, 8, units=10) == pytest.approx(5e9 + (w + g + o) / 8 + 2 * w / 10)


def test_residual_is_fitted_per_precision_class_and_scored_on_unseen_models():
    rows = pl.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "precision": ["fp16", "fp32", "fp16", "fp32"],
            "gpus": [8, 8, 8, 8],
            "measured_ratio": [1.20, 1.05, 1.10, 1.03],
            "physics_ratio": [1.0, 1.0, 1.0, 1.0],
        }
    )
    r = fit_residual(rows)
    assert r.share_at_8 == pytest.approx({"16bit": 0.15, "32bit": 0.04}) and sync_growth(8) == 1 and sync_growth(1) == 0
    lomo = leave_one_model_out(rows).sort("model", "precision")
    assert lomo["predicted_ratio"].to_list() == pytest.approx([1.10, 1.03, 1.20, 1.05])  # each model from the other
    assert r.ms(100.0, "bf16", 2) == pytest.approx(15.0 * math.sqrt(math.log(2) / math.log(8)))


@pytest.fixture(scope="module")
def op_models(tiny_pipeline):
    root, _, _ = tiny_pipeline("train_gpu_ops", "train_ops")
    return root / "models" / "steptime_ops"


def test_cli_answers_a_multi_gpu_step_and_refuses_bad_layouts(op_models, capsys):
    base = ["predict", "step-time", "--model", "mlp", "--batch-size", "32", "--models", str(op_models), "--hardware", "A100"]
    assert main([*base, "--gpus", "4", "--dataset-size", "1000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    p = d["parallel"]
    assert p["gpus"] == 4 and p["strategy"] == "ddp" and d["steps_per_epoch"] == math.ceil(1000 / (32 * 4))
    assert d["step_seconds"] == pytest.approx(p["step_ms"] / 1e3) and any("NVLink 300 GB/s" in n for n in d["notes"])
    assert main([*base, "--gpus", "4", "--nodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "8 × A100 80GB SXM4 (ddp)" in text and "collectives" in text and "Gb/s per node assumed (set --network)" in text
    for extra, message in (
        (["--gpus", "16"], "holds at most 8 GPUs"),
        (["--gpus", "2", "--parallel", "tp:2"], "no repeated stack of attention blocks"),
        (["--gpus", "4", "--parallel", "tp:3"], "does not divide --gpus 4"),
        (["--gpus", "2", "--parallel", "zero"], "not one of ddp, fsdp"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_tensor_parallel_splits_the_blocks_and_pays_four_all_reduces_each():
    from prenet.ops.trace import attention_blocks, trace_step
    from prenet.parallel.tensor_parallel import split_ops, tp_memory_bytes, tp_step
    from prenet.zoo import ZOO

    module, example = ZOO["gpt2_small_like"](batch_size=2)
    blocks, heads = attention_blocks(module)
    assert blocks == ["blocks.0", "blocks.1"] and heads == 12
    tr = trace_step(module, example, device_type="cuda", precision="bf16")
    assert tr.blocks == blocks and tr.heads == 12
    ops = tr.frame().with_columns(pl.lit(0.1).alias("predicted_ms"))
    split, block_out = split_ops(ops, blocks, 4, block_share=0.5)
    assert set(block_out) == set(blocks) and all(n == 2 * example[0].shape[1] * 768 for n in block_out.values())
    outside = ~pl.Series([any(str(m) == b or str(m).startswith(b + ".") for b in blocks) for m in ops["module"]])
    assert (split.filter(outside & (pl.col("phase") != "optimizer"))["predicted_ms"] == 0.1).all()  # embedding and head whole
    gemm_in_block = split.filter(~outside & (pl.col("family") == "gemm"))
    assert gemm_in_block.height > 0 and gemm_in_block["predicted_ms"].to_list() == pytest.approx([0.025] * gemm_in_block.height)
    model = ParallelModel(CollectiveModel(dict(PRIOR)), SyncResidual({}))
    one = OneGpuStep(ops, tr.grad_params, tr.params, float(ops["predicted_ms"].sum()), "bf16")
    step = tp_step(one, blocks, Layout(gpus=4, strategy="tp", tp=4), interconnect(A100), model, act_bytes=2)
    assert step.collectives == 4 * len(blocks) and step.exposed_ms == pytest.approx(step.comm_ms)  # nothing hides them
    assert step.compute_ms < one.step_ms and step.step_ms == pytest.approx(step.compute_ms + step.comm_ms)
    with pytest.raises(PrenetError, match="no repeated stack of attention blocks"):
        tp_step(one, [], Layout(gpus=4, strategy="tp", tp=4), interconnect(A100), model, act_bytes=2)
    assert tp_memory_bytes(1000, 400, [["blocks.0", 30], ["head", 10]], blocks, 4) == int(1000 - 400 * 0.75 * 0.75)
