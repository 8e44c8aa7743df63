"""pandera schemas (polars backend) of every table that crosses a stage boundary.

Each schema declares its key (``Config.unique``: the columns that identify a sample); validation is lazy,
so every failure is collected before the error is raised (see :func:`prenet.data.io.validate`).
"""

from __future__ import annotations

from typing import Optional

import pandera.polars as pa
from pandera.api.polars.types import PolarsData
import polars as pl

from prenet.names import (
    CORPUS_OPTIMIZERS,
    CORPUS_PHASES,
    DIRECTIONS,
    FAMILIES,
    LAYER_OPS,
    LAYER_OPTIMIZERS,
    LOSSES,
    NTK_METHODS,
    OOC_ACTIVATIONS,
    OOC_OPTIMIZERS,
    OPTIMIZERS,
    PRECISIONS,
    SCHEDULES,
)


def _is_finite(data: PolarsData) -> pl.LazyFrame:
    """Values must be finite: polars orders NaN above every number, so ``gt=0`` alone lets NaN through."""
    return data.lazyframe.select(pl.col(data.key).is_finite().fill_null(True))


OPS = list(LAYER_OPS)
SPLITS = ("train", "val", "holdout")


class _Shapes(pa.DataFrameModel):
    """Shape columns of every op (null where an op has no such column)."""

    batch: Optional[int] = pa.Field(ge=1, nullable=True)
    in_features: Optional[int] = pa.Field(ge=1, nullable=True)
    out_features: Optional[int] = pa.Field(ge=1, nullable=True)
    in_channels: Optional[int] = pa.Field(ge=1, nullable=True)
    out_channels: Optional[int] = pa.Field(ge=1, nullable=True)
    kernel_size: Optional[int] = pa.Field(ge=1, nullable=True)
    input_size: Optional[int] = pa.Field(ge=1, nullable=True)
    stride: Optional[int] = pa.Field(ge=1, nullable=True)
    padding: Optional[int] = pa.Field(ge=0, nullable=True)
    output_size: Optional[int] = pa.Field(ge=1, nullable=True)
    seq_len: Optional[int] = pa.Field(ge=1, nullable=True)
    hidden_size: Optional[int] = pa.Field(ge=1, nullable=True)
    embed_dim: Optional[int] = pa.Field(ge=1, nullable=True)
    num_heads: Optional[int] = pa.Field(ge=1, nullable=True)
    num_embeddings: Optional[int] = pa.Field(ge=1, nullable=True)
    embedding_dim: Optional[int] = pa.Field(ge=1, nullable=True)
    channels: Optional[int] = pa.Field(ge=1, nullable=True)
    hidden: Optional[int] = pa.Field(ge=1, nullable=True)


class RawTimings(_Shapes):
    """Output of ``benchmark``: one row per measurement on the local device. Times in ms per iteration."""

    measurement_id: str = pa.Field(unique=True, str_length={"min_value": 8})
    hardware_id: str = pa.Field(str_length={"min_value": 1})
    device: str
    threads: int = pa.Field(ge=1)
    torch_version: str
    dtype: str = pa.Field(isin=["float32", "float64", "float16", "bfloat16"])
    op: str = pa.Field(isin=OPS)
    direction: str = pa.Field(isin=list(DIRECTIONS))
    optimizer: str = pa.Field(isin=list(LAYER_OPTIMIZERS))
    time_ms: float = pa.Field(gt=0)
    time_ms_min: float = pa.Field(gt=0)
    time_ms_iqr: float = pa.Field(ge=0)
    spread_rel: float = pa.Field(ge=0)
    repeats: int = pa.Field(ge=1)
    number: int = pa.Field(ge=1)
    measured_at: str

    @pa.check("time_ms", "time_ms_min", "time_ms_iqr", "spread_rel", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        name = "RawTimings"


class LayerFeatures(_Shapes):
    """Output of ``featurize`` (and ``validate``): one row per (source, hardware, layer shape, direction,
    optimizer, dtype, threads, activation). Times in ms; FLOPs; bytes; hardware features as in
    :meth:`prenet.hardware.HardwareSpec.features`."""

    sample_id: str = pa.Field(str_length={"min_value": 8})
    shape_id: str = pa.Field(str_length={"min_value": 8})
    source: str = pa.Field(isin=["local", "justus2018", "neusight2025"])
    hardware_id: str = pa.Field(str_length={"min_value": 1})
    threads: int = pa.Field(ge=0)  # 0 = not applicable (GPU rows from external datasets)
    dtype: str
    op: str = pa.Field(isin=OPS)
    direction: str = pa.Field(isin=list(DIRECTIONS))
    optimizer: str = pa.Field(isin=list(LAYER_OPTIMIZERS))
    activation: str
    time_ms: float = pa.Field(gt=0)
    spread_rel: Optional[float] = pa.Field(ge=0, nullable=True)
    flops: float = pa.Field(ge=0)
    params: int = pa.Field(ge=0)
    weight_bytes: float = pa.Field(ge=0)
    input_bytes: float = pa.Field(ge=0)
    output_bytes: float = pa.Field(ge=0)
    bytes_moved: float = pa.Field(ge=0)
    ct_ms: float = pa.Field(ge=0)
    roofline_ms: float = pa.Field(ge=0)
    hw_peak_tflops: float = pa.Field(gt=0)
    hw_mem_bw_gbps: float = pa.Field(gt=0)
    hw_cores: float = pa.Field(gt=0)
    hw_clock_mhz: float = pa.Field(gt=0)
    hw_is_gpu: float = pa.Field(isin=[0.0, 1.0])

    @pa.check(
        "time_ms",
        "spread_rel",
        "flops",
        "weight_bytes",
        "input_bytes",
        "output_bytes",
        "bytes_moved",
        "ct_ms",
        "roofline_ms",
        "hw_peak_tflops",
        "hw_mem_bw_gbps",
        name="is_finite",
    )
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        unique = ["sample_id"]
        name = "LayerFeatures"


class SplitLayerFeatures(LayerFeatures):
    """Output of ``split``: :class:`LayerFeatures` plus the frozen assignment."""

    split: str = pa.Field(isin=list(SPLITS))

    class Config:
        strict = True
        unique = ["sample_id"]
        name = "SplitLayerFeatures"


class HoldoutPredictions(pa.DataFrameModel):
    """Output of ``evaluate``: measured vs predicted ms for every holdout row."""

    sample_id: str = pa.Field(unique=True)
    source: str
    hardware_id: str
    op: str = pa.Field(isin=OPS)
    direction: str = pa.Field(isin=list(DIRECTIONS))
    measured_ms: float = pa.Field(gt=0)
    predicted_ms: float = pa.Field(gt=0)

    @pa.check("measured_ms", "predicted_ms", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        name = "HoldoutPredictions"


class ModelTimings(pa.DataFrameModel):
    """Output of ``benchmark_models``: measured wall time of one whole-model training step (ms)."""

    model: str
    batch_size: int = pa.Field(ge=1)
    optimizer: str = pa.Field(isin=list(OPTIMIZERS))
    hardware_id: str = pa.Field(str_length={"min_value": 1})
    threads: int = pa.Field(ge=1)
    torch_version: str
    dtype: str
    params: int = pa.Field(ge=0)
    measured_ms: float = pa.Field(gt=0)
    spread_rel: float = pa.Field(ge=0)
    repeats: int = pa.Field(ge=1)
    measured_at: str
    #: measured peak memory of one training step (bytes): weights, gradients, optimizer state, batch, activations
    peak_memory_bytes: int = pa.Field(gt=0, nullable=True)
    #: the host-speed probe timed just before this row (ms, :mod:`prenet.measurement.probe`); absent in older tables
    probe_ms: Optional[float] = pa.Field(gt=0, nullable=True)

    @pa.check("measured_ms", "spread_rel", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        unique = ["model", "batch_size", "optimizer", "hardware_id", "threads"]
        name = "ModelTimings"


CURVE_SOURCES = ("real", "forecast", "default", "forecast_ode", "corrected", "linear_sgd", "dynamics_full")


class FinetuneRuns(pa.DataFrameModel):
    """Output of ``finetune``: one real fine-tuning run per sweep configuration (ground truth of the
    convergence predictor). ``group_id`` (the configuration without its seed) keys the frozen split;
    ``train_seconds``: wall time of the SGD steps only (s), measured with ``workers`` processes of ``threads``
    threads sharing the machine."""

    config_id: str = pa.Field(unique=True, str_length={"min_value": 8})
    group_id: str = pa.Field(str_length={"min_value": 8})
    task: str
    arch: str
    loss: str = pa.Field(isin=list(LOSSES))
    lr: float = pa.Field(gt=0)
    momentum: float = pa.Field(ge=0, lt=1)
    batch_size: int = pa.Field(ge=1)
    seed: int
    steps: int = pa.Field(ge=1)
    n_train: int = pa.Field(ge=1)
    classes: int = pa.Field(ge=2)
    n_params: int = pa.Field(ge=1)
    train_seconds: float = pa.Field(ge=0)
    diverged: bool
    threads: int = pa.Field(ge=1)
    workers: int = pa.Field(ge=1)
    device: str
    split: str = pa.Field(isin=list(SPLITS))

    class Config:
        strict = True
        name = "FinetuneRuns"


class LossCurves(pa.DataFrameModel):
    """Full-training-set loss (nats for cross-entropy, ½‖·‖² for MSE) and accuracy per SGD step, real or
    predicted (``source``). Non-finite loss marks a diverged run."""

    config_id: str
    source: str = pa.Field(isin=list(CURVE_SOURCES))
    step: int = pa.Field(ge=0)
    loss: float = pa.Field(nullable=True)
    accuracy: float = pa.Field(ge=0, le=1, nullable=True)

    class Config:
        strict = True
        unique = ["config_id", "source", "step"]
        name = "LossCurves"


class ForecastRuns(pa.DataFrameModel):
    """Output of ``forecast``: cost and reliability of each configuration's forecast. Seconds of wall time:
    ``plain_seconds`` (NTK + dynamics), ``probe_seconds`` (short real run + second NTK + re-linearized
    dynamics); ``drift`` = ‖Θ_k − Θ_0‖_F/‖Θ_0‖_F after the probe; one-batch probe features for the baseline."""

    config_id: str = pa.Field(unique=True)
    dynamics: str = pa.Field(isin=["ode", "sde"])
    ntk_method: str = pa.Field(isin=[m for m in NTK_METHODS if m != "auto"])  # the estimator auto resolved to
    n_used: int = pa.Field(ge=1)
    plain_seconds: float = pa.Field(ge=0)
    ode_seconds: float = pa.Field(ge=0, nullable=True)  # null: the ODE variant was not run (convergence.forecast.also_ode)
    probe_seconds: float = pa.Field(ge=0)
    ntk_seconds: float = pa.Field(ge=0)
    probe_steps: int = pa.Field(ge=0)
    drift: float = pa.Field(ge=0, nullable=True)
    reliable: bool
    init_loss: float
    grad_norm: float = pa.Field(ge=0, nullable=True)
    lam_max_over_n: float = pa.Field(ge=0)

    class Config:
        strict = True
        name = "ForecastRuns"


class ConvergenceTargets(pa.DataFrameModel):
    """Output of ``evaluate_convergence``: real and predicted steps to each target (null = not reached within
    the horizon) per configuration, target and prediction source."""

    config_id: str
    task: str
    regime: str
    split: str = pa.Field(isin=list(SPLITS))
    target_kind: str = pa.Field(isin=["relative_eps", "loss", "accuracy"])
    target_param: float
    source: str
    real_steps: Optional[int] = pa.Field(ge=0, nullable=True)
    pred_steps: Optional[int] = pa.Field(ge=0, nullable=True)

    class Config:
        strict = True
        unique = ["config_id", "target_kind", "target_param", "source"]
        name = "ConvergenceTargets"


class Telemetry(pa.DataFrameModel):
    """One training run's per-epoch telemetry (``prenet.telemetry.Recorder``; definitions in its docstring).
    Losses in nats; accuracies and fractions in [0, 1]; null = not measured (or not finite: a diverged run)."""

    epoch: int = pa.Field(ge=1, unique=True)
    train_loss: float = pa.Field(ge=0, nullable=True)
    train_accuracy: float = pa.Field(ge=0, le=1)
    log10_grad_snr: float = pa.Field(nullable=True)
    log10_grad_snr_median: float = pa.Field(nullable=True)
    grad_norm: float = pa.Field(ge=0, nullable=True)
    weight_norm_ratio: float = pa.Field(ge=0, nullable=True)
    weight_distance: float = pa.Field(ge=0, nullable=True)
    layer_norm_ratio_max: float = pa.Field(ge=0, nullable=True)
    layer_norm_ratio_mean: float = pa.Field(ge=0, nullable=True)
    update_ratio: float = pa.Field(ge=0, nullable=True)
    loss_end: float = pa.Field(ge=0, nullable=True)
    loss_trend: float = pa.Field(nullable=True)
    grad_norm_trend: float = pa.Field(nullable=True)
    val_loss: float = pa.Field(ge=0, nullable=True)
    val_accuracy: float = pa.Field(ge=0, le=1, nullable=True)
    dead_relu_frac: float = pa.Field(ge=0, le=1, nullable=True)
    saturated_frac: float = pa.Field(ge=0, le=1, nullable=True)
    lr: float = pa.Field(gt=0, nullable=True)
    momentum: float = pa.Field(ge=0, lt=1, nullable=True)
    adaptive: float = pa.Field(isin=[0.0, 1.0], nullable=True)
    minibatches: int = pa.Field(ge=0)

    class Config:
        strict = True
        name = "Telemetry"


class OutcomeRuns(pa.DataFrameModel):
    """Output of ``corpus``: one training run per row (config, final test accuracy, wall time in s), assigned to
    the frozen split by ``run_id`` (hash of the configuration)."""

    run_id: str = pa.Field(unique=True, str_length={"min_value": 8})
    domain: str
    arch: str
    dataset: str
    lr: float = pa.Field(gt=0)
    batch_size: int = pa.Field(ge=1)
    width: int = pa.Field(ge=1)
    depth: int = pa.Field(ge=1)
    activation: str = pa.Field(isin=["relu", "tanh"])
    init_scale: float = pa.Field(gt=0)
    weight_decay: float = pa.Field(ge=0)
    optimizer: str = pa.Field(isin=list(CORPUS_OPTIMIZERS))
    seed: int
    epochs: int = pa.Field(ge=1)
    schedule: str = pa.Field(isin=list(SCHEDULES))
    label_noise: float = pa.Field(ge=0, le=1)
    train_fraction: float = pa.Field(gt=0, le=1)
    momentum: float = pa.Field(ge=0, lt=1)
    phase: str = pa.Field(isin=list(CORPUS_PHASES))
    final_test_accuracy: float = pa.Field(ge=0, le=1)
    diverged: bool
    wall_seconds: float = pa.Field(ge=0)
    recorder_seconds: float = pa.Field(ge=0)
    threads: int = pa.Field(ge=1)
    split: str = pa.Field(isin=list(SPLITS))

    class Config:
        strict = True
        name = "OutcomeRuns"


class OocRuns(pa.DataFrameModel):
    """The out-of-corpus runs (``data/outcome/out_of_corpus`` and ``beyond_corpus``, :mod:`prenet.outcome.out_of_corpus`; input of
    ``evaluate_outcome_ooc``): a user's own loop over digits, one run per row, its settings and final test accuracy."""

    run_id: str = pa.Field(unique=True)
    width: int = pa.Field(ge=1)
    depth: int = pa.Field(ge=1)
    activation: str = pa.Field(isin=list(OOC_ACTIVATIONS))
    init_scale: float = pa.Field(gt=0)
    lr: float = pa.Field(gt=0)
    momentum: float = pa.Field(ge=0, lt=1)
    batch: int = pa.Field(ge=1)
    epochs: int = pa.Field(ge=1)
    seed: int
    final_test_accuracy: float = pa.Field(ge=0, le=1)
    diverged: bool
    epochs_recorded: int = pa.Field(ge=0)
    optimizer: Optional[str] = pa.Field(isin=list(OOC_OPTIMIZERS))  # absent: SGD (runs drawn before 2026-12-07)

    class Config:
        strict = True
        name = "OocRuns"


class OocRepeats(pa.DataFrameModel):
    """``data/outcome/out_of_corpus/runs_repeated.parquet``: the out-of-corpus settings (``run_id``) trained again with
    another seed, and where they ended (the seed-to-seed ceiling of any prediction)."""

    run_id: str = pa.Field(unique=True)
    seed: int
    final_test_accuracy: float = pa.Field(ge=0, le=1)
    diverged: bool

    class Config:
        strict = True
        name = "OocRepeats"


class OutcomeTelemetry(Telemetry):
    """Output of ``corpus``: the per-epoch telemetry of every run (:class:`Telemetry` plus ``run_id``)."""

    run_id: str
    epoch: int = pa.Field(ge=1)

    class Config:
        strict = True
        unique = ["run_id", "epoch"]
        name = "OutcomeTelemetry"


#: Identity key of each schema (used in messages and by the frozen split).
KEYS: dict[str, tuple[str, ...]] = {
    "RawTimings": ("measurement_id",),
    "LayerFeatures": ("sample_id",),
    "SplitLayerFeatures": ("sample_id",),
    "HoldoutPredictions": ("sample_id",),
    "ModelTimings": ("model", "batch_size", "optimizer", "hardware_id", "threads"),
    "FinetuneRuns": ("config_id",),
    "LossCurves": ("config_id", "source", "step"),
    "ForecastRuns": ("config_id",),
    "ConvergenceTargets": ("config_id", "target_kind", "target_param", "source"),
    "Telemetry": ("epoch",),
    "OutcomeRuns": ("run_id",),
    "OutcomeTelemetry": ("run_id", "epoch"),
    "OocRuns": ("run_id",),
    "OocRepeats": ("run_id",),
}


class OpTimings(pa.DataFrameModel):
    """Output of ``benchmark_ops`` and of the vendored GPU timings as ops (``train_ops`` input): one measured ATen op of a
    training step — FLOPs, bytes moved, its GEMM view and its time per call (ms)."""

    source: str
    kind: str
    hardware_id: str = pa.Field(str_length={"min_value": 1})
    config_id: str = pa.Field(str_length={"min_value": 1})
    precision: str = pa.Field(isin=list(PRECISIONS))
    threads: int = pa.Field(ge=0)
    tf1: int = pa.Field(isin=[0, 1])
    op: str
    family: str = pa.Field(isin=list(FAMILIES))
    phase: str = pa.Field(isin=["forward", "backward", "optimizer"])
    flops: float = pa.Field(ge=0)
    bytes: int = pa.Field(ge=0)
    dtype: str
    unit: str = pa.Field(isin=list(PRECISIONS))
    m: int = pa.Field(ge=0)
    n: int = pa.Field(ge=0)
    k: int = pa.Field(ge=0)
    batch: int = pa.Field(ge=0)
    groups: int = pa.Field(ge=1)
    out_numel: int = pa.Field(ge=0)
    layout: int = pa.Field(isin=[0, 1, 2, 3])
    measured_ms: float = pa.Field(gt=0)
    #: the host-speed probe timed just before this op's step (ms, :mod:`prenet.measurement.probe`); null: vendored GPU rows
    probe_ms: Optional[float] = pa.Field(gt=0, nullable=True)

    @pa.check("measured_ms", "flops", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)


class OpPredictions(pa.DataFrameModel):
    """Output of ``evaluate_gpu_ops`` (``evaluate_ops`` input): the op-level model's answer for one frozen-holdout op
    beside its measured time and its pure roofline (ms); ``estimate`` says how it was answered (``model``,
    ``analogy:<family>``, ``unit:<unit>``, ``roofline``)."""

    device: str = pa.Field(isin=["cpu", "gpu"])
    hardware_id: str = pa.Field(str_length={"min_value": 1})
    precision: str = pa.Field(isin=list(PRECISIONS))
    family: str = pa.Field(isin=list(FAMILIES))
    unit: str = pa.Field(isin=list(PRECISIONS))
    op: str
    measured_ms: float = pa.Field(gt=0)
    predicted_ms: float = pa.Field(gt=0)
    roofline_ms: float = pa.Field(ge=0)
    estimate: str

    @pa.check("measured_ms", "predicted_ms", "roofline_ms", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        name = "OpPredictions"


class ParallelScaling(pa.DataFrameModel):
    """Output of ``train_parallel``: DeepLearningExamples' 1 → N GPU scaling rows with the predicted one-GPU step and
    its data-parallel collectives (:func:`prenet.parallel.scaling.predict_scaling`); ms, ratios T_N / T_1."""

    model: str
    gpu_name: str
    precision: str = pa.Field(isin=list(PRECISIONS))
    batch: int = pa.Field(ge=1)
    hardware_id: str
    gpus: int = pa.Field(ge=2)
    measured_ratio: float = pa.Field(gt=0)
    t1_ms: float = pa.Field(gt=0)
    comm_ms: float = pa.Field(ge=0)
    exposed_ms: float = pa.Field(ge=0)
    physics_ratio: float = pa.Field(ge=1)

    @pa.check("measured_ratio", "t1_ms", "physics_ratio", name="is_finite")
    def _finite(cls, data: PolarsData) -> pl.LazyFrame:
        return _is_finite(data)

    class Config:
        strict = True
        name = "ParallelScaling"
        unique = ["model", "gpu_name", "precision", "batch", "gpus"]
