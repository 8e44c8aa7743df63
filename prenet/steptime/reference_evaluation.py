"""Whole-model training steps against published measurements, on GPUs and models no op model was fitted on.

* DeepLearningExamples' ConvNets on one GPU, in AMP (FP16 autocast), TF32 and FP32 (``data/external/dle2024``):
  ResNeXt101-32x4d, SE-ResNeXt101-32x4d at 224², and EfficientNet-B0 / B4 and their WideSE variants at 224² / 380².
  The published figure is images/s over the whole training loop (data loading included) on one GPU of a DGX; the
  measured step is ``batch / throughput`` (ms). Predicted as trained there (:data:`~prenet.reference_models.DLE_RECIPES`,
  their ``configs.yml``): AMP in channels_last (``memory_format: nhwc``), TF32 and FP32 in NCHW. No model's rows are
  fitted on: each is a held-out model. The EfficientNet rows under the "V100 32GB" heading are left out: that README's
  own paragraph calls the machine a V100 16GB DGX-1 and its rows disagree with the 16GB table (B4 at 36 vs 83 images/s),
  as the collection's ``notes`` column says.
* DeepLearningExamples' Transformer (big, WMT14 en-de) on one A100 40GB or V100, in AMP, TF32 and FP32: the published
  figure is target tokens/s; the measured step is ``--max-tokens / throughput``. ``--max-tokens`` bounds a
  length-bucketed batch's padded size, while the throughput counts its real target tokens, so this measured step is
  long by the batch's padding (a few %). Predicted with Adam as 320 pairs of 32-token sentences; its AMP is
  traced as its README runs it, apex O2 (:func:`trace_dle_step`), and its fused layer norm and dropout-add as torch's
  unfused ops.
* pytorch-gpu-benchmark's torchvision CNNs (``data/external/pytorch_gpu_benchmark``): the median FP32 step of 23
  architectures at batch 12 on five desktop GPUs (four absent from every training set) and an A100 (TF32 by torch's
  defaults of the time). That step is ``model.zero_grad()``, forward, loss and backward without an optimizer, plus the
  batch's host-to-device copy: predicted as the traced step less its optimizer phase as the host issues it
  (:mod:`prenet.steptime.host`), with the loop's own per-parameter ops (torch 1.x's ``zero_grad`` zeroes each gradient,
  one fill kernel, and the backward then adds into it, one add kernel, where a ``set_to_none`` loop issues neither), plus
  the copy at :data:`H2D_GBPS`. The DenseNet and SqueezeNet steps fit the host's cost per op (``train_ops``); the
  ResNets and VGGs are the test rows.

The models are built on ``meta`` at 224² (:mod:`prenet.reference_models`) and predicted through the one step-time path.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import torch

from prenet.hardware.catalog import get, resolve_name
from prenet.meta_device import build_on_meta
from prenet.ops import trace_step
from prenet.ops.records import StepTrace
from prenet.paths import data_dir
from prenet.reference_models import DLE_RECIPES, REFERENCE_MODELS, TORCHVISION_PARAMS, torchvision_model
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.host import HOST_CALIBRATION, fit_host_ms, issue_bound_ms, issued
from prenet.steptime.step import grad_accumulation_records, predict_frames, predict_trace_many, zero_grad_records

#: DeepLearningExamples' GPU and precision names → catalog GPUs (DGX-1 V100s are SXM2) and prenet precisions
DLE_GPUS = {"A100 80GB": "A100 80GB SXM4", "A100 40GB": "A100 40GB SXM4", "V100 16GB": "V100 SXM2", "V100 32GB": "V100 SXM2"}
DLE_PRECISIONS = {"amp_fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}


def _ape(column: str) -> pl.Expr:
    """Absolute percentage error of ``column`` against ``measured_ms`` (%): one definition for every check here."""
    return 100.0 * (pl.col(column) - pl.col("measured_ms")).abs() / pl.col("measured_ms")


#: The vendored DeepLearningExamples tables of the single-GPU check (``data/external/dle2024``)
DLE_CHECK_FILES = ("dle_convnets_throughput.csv", "dle_efficientnet_throughput.csv", "dle_transformer_throughput.csv")
#: A row the collection flags as inconsistent (its ``notes``): not a measurement to score against
DLE_FLAGGED = "look inconsistent"


def load_dle_rows(root: Path | None = None) -> pl.DataFrame:
    """Single-GPU rows of the vendored models (flagged rows left out, module docstring): model (the variant where the
    table has one), DLE GPU name, catalog GPU, precision, batch (images; the Transformer's ``--max-tokens``), image size
    (``configs.yml``; 224 where an image row gives none, null for the Transformer), measured ms/step."""
    folder = (root or data_dir()) / "external" / "dle2024"
    raw = pl.concat([pl.read_csv(folder / f, infer_schema_length=0) for f in DLE_CHECK_FILES], how="diagonal")
    raw = raw.with_columns(pl.coalesce(pl.col("model_variant"), pl.col("model")).alias("model"))
    return (
        raw.filter(
            (pl.col("num_gpus") == "1")
            & pl.col("model").is_in(list(REFERENCE_MODELS))
            & pl.col("gpu_name").is_in(list(DLE_GPUS))
            & ~pl.col("notes").fill_null("").str.contains(DLE_FLAGGED, literal=True)
        )
        .select(
            "model",
            pl.col("gpu_name").alias("dle_gpu"),
            pl.col("gpu_name").replace_strict(DLE_GPUS).alias("hardware_id"),
            pl.col("precision").replace_strict(DLE_PRECISIONS).alias("precision"),
            pl.col("batch_size_per_gpu").cast(pl.Int64).alias("batch"),
            pl.when(pl.col("throughput_unit") == "images/s")
            .then(pl.col("extra").fill_null("").str.extract(r"image_size=(\d+)").cast(pl.Int64).fill_null(224))
            .otherwise(None)
            .alias("image_size"),
            (pl.col("batch_size_per_gpu").cast(pl.Float64) / pl.col("throughput_per_gpu").cast(pl.Float64) * 1e3).alias("measured_ms"),
        )
        .sort("model", "precision", "dle_gpu")
    )


def as_half(module: torch.nn.Module, example: tuple) -> tuple[torch.nn.Module, tuple]:
    """``model.half()`` on FP16 inputs (token ids stay integers): every op in FP16 with no autocast, as apex O2 and a
    pure-FP16 benchmark run it; trace it at precision fp32 (no autocast), its dtypes give the FP16 units."""
    x, y = example
    return module.half(), (x.half() if x.is_floating_point() else x, y)


def trace_dle_step(name: str, precision: str, batch: int, image_size: int | None = None):
    """The CUDA training step DeepLearningExamples runs for model ``name`` at ``batch`` (and ``image_size``), as its
    recipe says (:data:`~prenet.reference_models.DLE_RECIPES`): its optimizer, fused or not; AMP (``precision`` fp16) as autocast,
    in channels_last where it runs NHWC, or as apex O2, the model and its floating inputs in FP16 with no autocast, the
    loss scaled and the optimizer on FP32 master weights."""
    module, example = build_on_meta(REFERENCE_MODELS[name], batch_size=batch, **({} if image_size is None else {"image_size": image_size}))
    r = DLE_RECIPES[name]
    if precision == "fp16" and r.amp == "o2":
        return trace_step(*as_half(module, example), optimizer=r.optimizer, fused=r.fused, precision="fp32", device_type="cuda", master_weights=True)
    fmt = "channels_last" if precision == "fp16" and r.nhwc else "contiguous"
    return trace_step(module, example, optimizer=r.optimizer, fused=r.fused, precision=precision, device_type="cuda", memory_format=fmt)


def dle_whole_model(model: EfficiencyModel, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """``rows`` (default :func:`load_dle_rows`) plus ``predicted_ms``, ``ape_pct`` and each step's share of GEMM/conv
    time; one trace per (model, precision, batch), one batched prediction over its GPUs."""
    rows = load_dle_rows() if rows is None else rows
    out = []
    for (name, precision, batch, size), group in rows.group_by(["model", "precision", "batch", "image_size"], maintain_order=True):
        trace = trace_dle_step(str(name), str(precision), int(batch), None if size is None else int(size))
        hws = [get(h) for h in group.get_column("hardware_id").to_list()]
        for row, (pred, _) in zip(group.iter_rows(named=True), predict_trace_many(trace, hws, model)):
            share = pred.family_share
            out.append({**row, "predicted_ms": pred.step_seconds * 1e3, "compute_share": share.get("conv", 0.0) + share.get("gemm", 0.0)})
    df = pl.DataFrame(out)
    return df.with_columns(_ape("predicted_ms").alias("ape_pct"))


def _error_stats(g: pl.DataFrame) -> dict:
    """Rows, MAPE (%) and signed median error (%, +: predicted too slow) of checked rows (``{"n": 0}`` for none)."""
    if not g.height:
        return {"n": 0}
    signed = 100.0 * (g["predicted_ms"].to_numpy() / g["measured_ms"].to_numpy() - 1.0)
    return {"n": g.height, "mape_pct": float(g["ape_pct"].mean()), "median_signed_pct": float(np.median(signed))}


def _mape_by(df: pl.DataFrame, column: str) -> dict[str, float]:
    """MAPE (%, one decimal) per value of ``column``, in order of appearance."""
    return {k: round(float(g["ape_pct"].mean()), 1) for (k,), g in df.group_by([column], maintain_order=True)}


def dle_summary(df: pl.DataFrame) -> dict:
    """MAPE and signed median error (+: predicted too slow) overall, per precision and per model (each model a held-out
    one: no row of any is fitted on)."""
    per = {p: _error_stats(g) for (p,), g in df.group_by(["precision"], maintain_order=True)}
    models = {m: _error_stats(g) for (m,), g in df.group_by(["model"], maintain_order=True)}
    return {**_error_stats(df), "models": len(models), "per_precision": per, "per_model": models}


#: pytorch-gpu-benchmark's precision labels → prenet precisions (its A100 "float" ran TF32: torch ≥ 1.7 defaults);
#: ``fp16_pure``: ``model.half()`` on half inputs, no autocast (every op in FP16, GEMMs and convolutions on the FP16
#: tensor cores), traced as such
RYU_PRECISIONS = {
    "fp32 (float)": "fp32",
    "fp32 (float; TF32 likely on A100 with torch>=1.7 defaults)": "tf32",
    "fp16_pure (model.half())": "fp16_pure",
}
#: The precisions whose steps fit the host cost per op (``fp16_pure`` steps are test rows only)
RYU_HOST_PRECISIONS = ("fp32", "tf32")
#: Host-to-device copy rate of a pageable batch (GB/s) over the boards' PCIe generation: ~10 of 16 GB/s on PCIe 3.0
#: x16 (every GPU of that benchmark but the A100), ~20 on PCIe 4.0 (the A100's host link)
H2D_GBPS = {"A100 40GB SXM4": 20.0}
H2D_GBPS_DEFAULT = 10.0
#: GPUs of that benchmark whose kernels some op model was fitted on (DeepBench's GTX 1080 Ti FP32 kernels)
RYU_KERNELS_SEEN = ("GTX 1080 Ti",)


def _has_fp16_peak(hardware_id: str) -> bool:
    return get(hardware_id).peak_tflops("fp16") is not None


def load_ryujaehun_rows(root: Path | None = None) -> pl.DataFrame:
    """Single-GPU FP32 (A100: TF32) and pure-FP16 rows of the architectures built here, duplicates dropped: model, GPU
    name, catalog GPU, precision, batch, measured median ms/step, and whether an op model saw that GPU's kernels.
    Pure-FP16 rows of GPUs whose spec sheet has no FP16 peak (Pascal: GTX 1080 Ti, TITAN Xp, whose cuDNN runs FP16
    storage with FP32 math) are left out: prenet answers an FP16 job there with one line naming the missing unit."""
    raw = pl.read_csv((root or data_dir()) / "external" / "pytorch_gpu_benchmark" / "ryujaehun_train_step_times.csv.gz", infer_schema_length=0)
    rows = raw.filter(
        (pl.col("num_gpus") == "1")
        & (pl.col("duplicate_of_file").fill_null("") == "")
        & pl.col("precision").is_in(list(RYU_PRECISIONS))
        & pl.col("model").is_in(list(TORCHVISION_PARAMS))
    )
    return (
        rows.with_columns(pl.col("gpu").map_elements(lambda g: get(g).hardware_id, return_dtype=pl.String).alias("hardware_id"))
        .select(
            "model",
            pl.col("gpu").alias("source_gpu"),
            "hardware_id",
            pl.col("precision").replace_strict(RYU_PRECISIONS).alias("precision"),
            pl.col("batch_per_gpu").cast(pl.Int64).alias("batch"),
            pl.col("median_ms").cast(pl.Float64).alias("measured_ms"),
        )
        .with_columns(pl.col("hardware_id").is_in(list(RYU_KERNELS_SEEN)).alias("kernels_seen"))
        .filter((pl.col("precision") != "fp16_pure") | pl.col("hardware_id").map_elements(_has_fp16_peak, return_dtype=pl.Boolean))
        .unique(["model", "hardware_id", "precision"], keep="first", maintain_order=True)
        .sort("model", "hardware_id")
    )


#: one traced loop of :func:`ryujaehun_traces`: (model, precision, batch) -> (its traced step, the batch's bytes)
RyuTraces = dict[tuple[str, str, int], tuple[StepTrace, int]]


def ryujaehun_traces(rows: pl.DataFrame) -> RyuTraces:
    """The benchmark's loop (torch 1.x) per (model, precision, batch) of ``rows`` (:func:`load_ryujaehun_rows`), traced
    on meta for CUDA: zero_grad()'s per-parameter fills, forward, loss, backward and its per-parameter gradient adds, in
    issue order; and the bytes of the batch it copies to the GPU. Module-level and independent of any model, so a
    caller may trace in another process while it fits the model the steps are predicted with."""
    out: RyuTraces = {}
    for (name, precision, batch), _ in rows.group_by(["model", "precision", "batch"], maintain_order=True):
        module, example = build_on_meta(partial(torchvision_model, str(name)), batch_size=int(batch))
        if precision == "fp16_pure":
            module, example = as_half(module, example)
        traced = "fp32" if precision == "fp16_pure" else str(precision)
        trace = trace_step(module, example, optimizer="sgd", precision=traced, device_type="cuda")
        # the benchmark's loop (torch 1.x): zero_grad() zeroes each gradient, the backward adds into it
        trace.records = zero_grad_records(module) + trace.records + grad_accumulation_records(module)
        out[(str(name), str(precision), int(batch))] = (trace, example[0].numel() * example[0].element_size())
    return out


def ryujaehun_steps(model: EfficiencyModel, rows: pl.DataFrame, traces: RyuTraces | None = None) -> list[tuple[dict, np.ndarray, np.ndarray, float]]:
    """Per row of ``rows`` (:func:`load_ryujaehun_rows`): (row, predicted GPU ms of each op of the benchmark's loop in
    issue order (:func:`ryujaehun_traces`; ``traces``: already traced), which of them the host issues, the batch's
    host-to-device copy ms); one batched prediction over each trace's GPUs."""
    traces = ryujaehun_traces(rows) if traces is None else traces
    out = []
    for (name, precision, batch), group in rows.group_by(["model", "precision", "batch"], maintain_order=True):
        trace, batch_bytes = traces[(str(name), str(precision), int(batch))]
        hws = [get(h) for h in group.get_column("hardware_id").to_list()]
        for row, ops in zip(group.iter_rows(named=True), predict_frames(trace, hws, model)):
            ops = ops.filter(pl.col("phase") != "optimizer")  # the benchmark times no optimizer step
            h2d_ms = batch_bytes / (H2D_GBPS.get(row["hardware_id"], H2D_GBPS_DEFAULT) * 1e9) * 1e3
            out.append((row, ops.get_column("predicted_ms").to_numpy(), issued(ops), h2d_ms))
    return out


def host_calibration_rows(rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rows of ``rows`` (default :func:`load_ryujaehun_rows`) the host cost per op is fitted on: the
    :data:`HOST_CALIBRATION` architectures in the :data:`RYU_HOST_PRECISIONS`, on every GPU."""
    rows = load_ryujaehun_rows() if rows is None else rows
    return rows.filter(pl.col("model").is_in(list(HOST_CALIBRATION)) & pl.col("precision").is_in(list(RYU_HOST_PRECISIONS)))


def fit_host(model: EfficiencyModel, rows: pl.DataFrame | None = None, traces: RyuTraces | None = None) -> tuple[float, float, int]:
    """(host ms per issued op, its MAPE %, steps) fitted on the measured steps of :func:`host_calibration_rows` of
    ``rows``, with ``model``'s GPU op times (``traces``: those rows' :func:`ryujaehun_traces`, when already traced)."""
    cal = host_calibration_rows(rows)
    steps = [(r["measured_ms"], g, iss, h2d) for r, g, iss, h2d in ryujaehun_steps(model, cal, traces)]
    h, mape = fit_host_ms(steps)
    return h, mape, len(steps)


def _calibration(row: dict) -> bool:
    """Whether a row fits the host cost per op (:func:`fit_host`) rather than tests it."""
    return row["model"] in HOST_CALIBRATION and row["precision"] in RYU_HOST_PRECISIONS


def ryujaehun_whole_model(model: EfficiencyModel, rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """``rows`` (default :func:`load_ryujaehun_rows`) plus ``predicted_ms`` (the benchmark's loop: zero_grad, forward, loss,
    backward, as the host issues them and the GPU runs them, and the input copy ``h2d_ms``), ``host_ms`` (the host cost per op used), ``host_bound``
    (the host's issue time exceeds the GPU's work), ``calibration`` (an architecture the host cost is fitted on: not a
    test row) and ``ape_pct``. When ``model`` has a GPU host cost, each test row is answered with a host cost refitted
    on the calibration steps of the other GPUs (each GPU was measured on its own machine), so no figure of a GPU saw
    that GPU's host; calibration rows keep ``model``'s own."""
    rows = load_ryujaehun_rows() if rows is None else rows
    steps = ryujaehun_steps(model, rows)
    own = model.host_ms.get("gpu", 0.0)
    cal = [(r["hardware_id"], (r["measured_ms"], g, iss, h2d)) for r, g, iss, h2d in steps if _calibration(r)]
    held_out: dict[str, float] = {}
    out = []
    for row, g, iss, h2d_ms in steps:
        calibration = _calibration(row)
        host_ms = own
        if own > 0 and not calibration:
            hw = row["hardware_id"]
            if hw not in held_out:
                held_out[hw] = fit_host_ms([c for h, c in cal if h != hw])[0] if any(h != hw for h, _ in cal) else own
            host_ms = held_out[hw]
        out.append(
            {
                **row,
                "predicted_ms": issue_bound_ms(g, iss, host_ms) + h2d_ms,
                "h2d_ms": h2d_ms,
                "host_ms": host_ms,
                "host_bound": float(iss.sum()) * host_ms > float(g.sum()),
                "calibration": calibration,
            }
        )
    df = pl.DataFrame(out)
    return df.with_columns(_ape("predicted_ms").alias("ape_pct"))


def ryujaehun_summary(df: pl.DataFrame) -> dict:
    """MAPE and signed median error (+: predicted too slow) for the FP32 test rows on GPUs never fitted on (the target),
    on the GTX 1080 Ti (kernels seen), and the A100 (TF32); per GPU for the unseen ones; the host-cost calibration
    rows (every GPU, FP32/TF32) apart; the pure-FP16 rows, overall and per GPU."""
    calibration = df.filter(pl.col("calibration"))
    df = df.filter(~pl.col("calibration"))
    fp32 = df.filter(pl.col("precision") == "fp32")
    unseen = fp32.filter(~pl.col("kernels_seen"))
    fp16 = df.filter(pl.col("precision") == "fp16_pure")
    return {
        "host_calibration": _error_stats(calibration),
        "unseen_fp32": _error_stats(unseen),
        "kernels_seen_fp32": _error_stats(fp32.filter(pl.col("kernels_seen"))),
        "a100_tf32": _error_stats(df.filter(pl.col("precision") == "tf32")),
        "per_gpu": _mape_by(unseen, "hardware_id"),
        # model.half() steps (FP16 everywhere, no autocast) on the GPUs with FP16 tensor cores, every architecture
        "fp16_pure": _error_stats(fp16),
        "fp16_pure_per_gpu": _mape_by(fp16, "hardware_id"),
    }


#: NeuSight's device names of the rows predicted, as catalog GPUs through ``resolve_name`` and the catalog's aliases
#: (its A100 80GB is the PCIe board; its H100 the SXM5 HBM3 one)
NEUSIGHT_GPUS = ("NVIDIA_H100_80GB_HBM3", "NVIDIA_L4", "NVIDIA_A100_80GB_PCIe", "Tesla_V100-PCIE-32GB")
#: GPUs whose FP32 op timings some op model was fitted on (NeuSight's own training GPUs): reported apart from the target.
#: The others' FP32 ops never were, but the H100's BF16/TF32 matmul kernels (XLA's table) are fitted, and the A100
#: 80GB PCIe is the sibling of NeuSight's A100 40GB PCIe
NEUSIGHT_SEEN = ("V100 PCIe 16/32GB",)
#: Models rebuilt here (:mod:`prenet.transformer_references`); SwitchTransformers (MoE) is not
NEUSIGHT_MODELS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_27", "opt_13")


def load_neusight_e2e_rows(root: Path | None = None) -> pl.DataFrame:
    """NeuSight's measured single-GPU FP32 training steps (forward + backward, ms) of the rebuilt models on catalog
    GPUs, with NeuSight's own prediction beside each: model, seq_len, batch, GPU, measured, forward, neusight ms."""
    ext = (root or data_dir()) / "external" / "neusight2025"
    raw = pl.read_csv(ext / "neusight_e2e_train.csv", infer_schema_length=0)
    return (
        raw.filter(pl.col("option").is_null() & pl.col("device").is_in(list(NEUSIGHT_GPUS)) & pl.col("model_name").is_in(list(NEUSIGHT_MODELS)))
        .select(
            pl.col("model_name").alias("model"),
            pl.col("seqlen").cast(pl.Int64).alias("seq_len"),
            pl.col("batch").cast(pl.Int64),
            pl.col("device").replace_strict({d: resolve_name(d) for d in NEUSIGHT_GPUS}).alias("hardware_id"),
            pl.col("label_all_e2e_latency").cast(pl.Float64).alias("measured_ms"),
            pl.col("label_all_fw_latency").cast(pl.Float64).alias("measured_forward_ms"),
            pl.col("neusight_all_e2e_latency").cast(pl.Float64).alias("neusight_ms"),
        )
        .with_columns(pl.col("hardware_id").is_in(list(NEUSIGHT_SEEN)).alias("gpu_seen"))
        .sort("model", "seq_len", "batch", "hardware_id")
    )


def layer_replicated_trace(config: dict, batch: int, seq_len: int):
    """The training-step trace of the transformer ``config`` describes, from a 2-layer copy of it: the second layer's
    ops (forward and backward, by module name) stand for every layer past the first, as the layers are identical
    (NeuSight predicts the same way). Equal to the full trace's op multiset (tests/test_transformer_references.py),
    at a fraction of the trace time (a 2.7 B-parameter GPT: 2 layers instead of 32)."""
    from prenet.transformer_references import ARCHITECTURES, LAYERS, from_config

    key, prefix = LAYERS[str(config["architectures"][0])]
    layers = int(config[key])
    assert str(config["architectures"][0]) in ARCHITECTURES
    with torch.device("meta"):
        module, example = from_config({**config, key: min(layers, 2)}, batch_size=batch, seq_len=seq_len)
    trace = trace_step(module, example, optimizer="sgd", precision="fp32", device_type="cuda")
    if layers > 2:
        second = [r for r in trace.records if r.module == f"{prefix}1" or r.module.startswith(f"{prefix}1.")]
        trace.records = trace.records + second * (layers - 2)
    return trace


def neusight_whole_model(model: EfficiencyModel, rows: pl.DataFrame | None = None, root: Path | None = None) -> pl.DataFrame:
    """``rows`` (default :func:`load_neusight_e2e_rows`) plus ``predicted_ms`` and ``ape_pct`` (and NeuSight's own
    ``neusight_ape_pct``). Predicted as NeuSight timed it: FP32 (its transformers have no convolutions, so torch's default
    TF32 convolutions change nothing: every op on the FP32 units), forward without the loss, the loss's
    backward and the model's, gradients accumulated (no ``zero_grad``), no optimizer step."""
    import json

    from prenet.transformer_references import from_config

    rows = load_neusight_e2e_rows(root) if rows is None else rows
    configs = (root or data_dir()) / "external" / "neusight2025" / "model_configs"
    out = []
    for (name, seq_len, batch), group in rows.group_by(["model", "seq_len", "batch"], maintain_order=True):
        config = json.loads((configs / f"{name}.json").read_text())
        with torch.device("meta"):
            module, _ = from_config(config, batch_size=int(batch), seq_len=int(seq_len))
        trace = layer_replicated_trace(config, int(batch), int(seq_len))
        trace.records = [r for r in trace.records if r.phase != "optimizer" and not (r.phase == "forward" and r.module == "(top)")]
        trace.records += grad_accumulation_records(module)
        hws = [get(h) for h in group.get_column("hardware_id").to_list()]
        for row, (pred, _) in zip(group.iter_rows(named=True), predict_trace_many(trace, hws, model)):
            out.append({**row, "predicted_ms": pred.step_seconds * 1e3})
    df = pl.DataFrame(out)
    return df.with_columns(_ape("predicted_ms").alias("ape_pct"), _ape("neusight_ms").alias("neusight_ape_pct"))


def neusight_summary(df: pl.DataFrame) -> dict:
    """prenet's and NeuSight's MAPE on the same rows: the GPUs no op model was fitted on (the target), per GPU, and the
    V100 (seen); signed median error of prenet (+: too slow)."""
    unseen = df.filter(~pl.col("gpu_seen"))

    def stats(g: pl.DataFrame) -> dict:
        if not g.height:
            return {"n": 0}
        signed = 100.0 * (g["predicted_ms"].to_numpy() / g["measured_ms"].to_numpy() - 1.0)
        return {
            "n": g.height,
            "mape_pct": float(g["ape_pct"].mean()),
            "neusight_mape_pct": float(g["neusight_ape_pct"].mean()),
            "median_signed_pct": float(np.median(signed)),
        }

    return {
        "unseen_fp32": stats(unseen),
        "seen_fp32": stats(df.filter(pl.col("gpu_seen"))),
        "per_gpu": _mape_by(unseen, "hardware_id"),
    }


#: the transformers-vs-rebuild check (issue 31): NeuSight's configs, cut to this many layers (the op mix per layer is
#: the whole question), ``batch × seq_len`` tokens, FP32 on an A100 and BF16 autocast on an H100
PARITY_CONFIGS = {"gpt2_large": "GPT2LMHeadModel", "opt_13": "OPTForCausalLM", "bert_large": "BertForPreTraining"}
PARITY_JOBS = (("fp32", "A100 80GB PCIe"), ("bf16", "H100 SXM5 80GB"))


def hf_parity(model: EfficiencyModel, *, layers: int = 2, batch: int = 4, seq_len: int = 512, root: Path | None = None) -> pl.DataFrame:
    """One row per (config, precision): the predicted training step (Adam) of transformers' own model (eager attention,
    as the rebuilds run) and of prenet's op-for-op rebuild (:mod:`prenet.transformer_references`) of the installed
    transformers' major version, their op counts and the difference (%). Same ops, same answer: the difference should
    stay within 2 %."""
    import json

    from prenet.hf_models import LMLogits, build_from_config, config_from_fields, transformers_major
    from prenet.steptime.step import predict_trace
    from prenet.transformer_references import LAYERS, from_config

    configs = (root or data_dir()) / "external" / "neusight2025" / "model_configs"
    major = transformers_major()  # the rebuild follows the installed version's eager attention
    out = []
    for name, arch in PARITY_CONFIGS.items():
        fields = json.loads((configs / f"{name}.json").read_text())
        fields = {**fields, LAYERS[arch][0]: layers, "architectures": [arch]}
        config = config_from_fields(fields, name)
        config._attn_implementation = "eager"
        with torch.device("meta"):
            hf = LMLogits(build_from_config(config))
            ids = torch.ones(batch, seq_len, dtype=torch.long)
            rebuilt, example = from_config(fields, batch_size=batch, seq_len=seq_len, transformers=major)
        for precision, hw_name in PARITY_JOBS:
            hw = get(hw_name)
            kw = {"optimizer": "adam", "precision": precision, "device_type": "cuda"}
            a, _ = predict_trace(trace_step(hf, (ids, ids.flatten()), **kw), hw, model)
            b, _ = predict_trace(trace_step(rebuilt, example, **kw), hw, model)
            out.append(
                {
                    "model": name,
                    "layers": layers,
                    "precision": precision,
                    "hardware_id": hw.hardware_id,
                    "transformers_ms": a.step_seconds * 1e3,
                    "rebuilt_ms": b.step_seconds * 1e3,
                    "transformers_ops": a.ops,
                    "rebuilt_ops": b.ops,
                    "diff_pct": 100.0 * (a.step_seconds / b.step_seconds - 1.0),
                }
            )
    return pl.DataFrame(out)


def hf_parity_summary(df: pl.DataFrame) -> dict:
    """The largest |difference| (%), how many jobs are within 2 %, and each job's difference."""
    d = df.get_column("diff_pct").abs()
    return {
        "n": df.height,
        "max_abs_diff_pct": float(d.max()),
        "within_2pct": int((d <= 2.0).sum()),
        "per_job": {f"{r['model']} {r['precision']}": round(r["diff_pct"], 2) for r in df.iter_rows(named=True)},
    }
