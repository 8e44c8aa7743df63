"""The published-architecture models and the whole-model check against DeepLearningExamples' measured throughput."""

import polars as pl
import pytest

from prenet.meta_device import build_on_meta
from prenet.reference_models import REFERENCE_MODELS
from prenet.steptime.efficiency import EfficiencyModel
from prenet.steptime.reference_evaluation import dle_summary, dle_whole_model, load_dle_rows


@pytest.mark.parametrize("name, params_m", [("ResNeXt101-32x4d", 44.18), ("SE-ResNeXt101-32x4d", 48.96)])
def test_reference_models_have_the_published_parameter_counts(name, params_m):
    module, (x, y) = build_on_meta(REFERENCE_MODELS[name], batch_size=2)
    assert sum(p.numel() for p in module.parameters()) / 1e6 == pytest.approx(params_m, abs=0.01)
    assert tuple(x.shape) == (2, 3, 224, 224) and tuple(y.shape) == (2,)


def test_dle_rows_are_single_gpu_steps_in_three_precisions_on_catalog_gpus():
    rows = load_dle_rows()
    assert rows.height == 12 and set(rows["precision"]) == {"fp16", "tf32", "fp32"}
    assert set(rows["hardware_id"]) == {"A100 80GB SXM4", "V100 SXM2"}
    r = rows.filter((pl.col("model") == "ResNeXt101-32x4d") & (pl.col("dle_gpu") == "A100 80GB") & (pl.col("precision") == "fp16")).row(0, named=True)
    assert r["batch"] == 128 and r["measured_ms"] == pytest.approx(128 / 1211 * 1e3)


def test_whole_model_check_predicts_every_row_through_the_step_path():
    rows = load_dle_rows().filter(pl.col("model") == "ResNeXt101-32x4d")
    df = dle_whole_model(EfficiencyModel(median_efficiency={"gpu": 0.5}), rows)  # no trees: roofline ÷ 0.5
    assert df.height == rows.height and (df["predicted_ms"] > 0).all() and df["compute_share"].is_between(0.05, 0.95).all()
    fp16 = df.filter((pl.col("precision") == "fp16") & (pl.col("dle_gpu") == "A100 80GB"))["predicted_ms"][0]
    tf32 = df.filter((pl.col("precision") == "tf32") & (pl.col("dle_gpu") == "A100 80GB"))["predicted_ms"][0]
    assert fp16 < tf32  # same batch: tensor-core FP16 beats TF32 on an A100
    s = dle_summary(df)
    assert s["n"] == rows.height and set(s["per_precision"]) == {"fp16", "tf32", "fp32"}
