"""Loaders of the vendored external timings."""

import polars as pl
import pytest

from prenet.data.external import load_justus_conv, load_justus_dense, load_neusight_conv, load_neusight_linear
from prenet.hardware import catalog


@pytest.mark.parametrize(
    "loader,op,gpus",
    [
        (load_justus_dense, "linear", 6),
        (load_justus_conv, "conv2d", 6),
        (load_neusight_linear, "linear", 5),
        (load_neusight_conv, "conv2d", 5),
    ],
)
def test_loader_shape_and_hardware(loader, op, gpus):
    df = loader(max_rows_per_gpu=50)
    assert set(df["op"]) == {op}
    assert df["hardware_id"].n_unique() == gpus
    assert set(df["hardware_id"]) <= set(catalog())
    assert (df["time_ms"] > 0).all()
    assert df.group_by("hardware_id").agg(pl.len()).get_column("len").max() <= 50 * 3  # ≤ 3 direction/optimizer rows per shape


def test_justus_directions_and_same_padding():
    df = load_justus_conv(max_rows_per_gpu=300)
    assert set(df["direction"]) == {"forward", "train_step"}
    assert set(df.filter(pl.col("direction") == "train_step")["optimizer"]) == {"sgd", "adam"}
    same = df.filter(pl.col("padding") > 0)
    # TensorFlow 'same': output = ceil(input / stride)
    assert (same["output_size"] == (same["input_size"] + same["stride"] - 1) // same["stride"]).all()


def test_neusight_linear_folds_batch_dims():
    df = load_neusight_linear(max_rows_per_gpu=20)
    assert set(df["direction"]) == {"forward"}
    assert df["batch"].min() >= 1


def test_subsample_is_stable_and_paired_across_gpus():
    a = load_neusight_conv(max_rows_per_gpu=30)
    b = load_neusight_conv(max_rows_per_gpu=30)
    assert a.equals(b)
    shapes = a.group_by("hardware_id").agg(pl.struct("batch", "in_channels", "out_channels", "kernel_size", "input_size").n_unique().alias("n"))
    assert shapes["n"].max() <= 30


def test_an_unknown_or_unlisted_source_is_refused_not_dropped():
    from prenet.data.external import load_external
    from prenet.errors import PrenetError

    assert load_external(["justus2018"], ["linear"], 5).height > 0
    with pytest.raises(PrenetError, match="unknown external source.*'justus2019'.*justus2018, neusight2025"):
        load_external(["justus2019"], ["linear"], 5)
    with pytest.raises(PrenetError, match="must be a list of names"):
        load_external("justus2018", ["linear"], 5)  # type: ignore[arg-type]
