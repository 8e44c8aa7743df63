"""Measured collectives (``data/external/collectives/``) as one table the collective model fits and is scored on.

Columns: ``source``, ``system`` (the GPUs measured), ``op`` (:data:`~prenet.parallel.collectives.OPS`), ``n`` (GPUs
in the ring), ``groups`` (concurrent rings), ``size_bytes`` (the full tensor, bytes), ``measured_us`` (µs), ``link``
and ``link_gbps`` (spec bandwidth per GPU and direction, GB/s), ``nvls`` (the NVSwitch can reduce in the switch:
NVLink SHARP, third-generation NVSwitch on), ``key`` (the row's identity for the frozen split).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from prenet.parallel.interconnect import PCIE_GBPS_PER_LANE

#: XLA's device keys → (system, NVLink bandwidth per GPU and direction in GB/s, from NVIDIA's datasheets: H100 SXM
#: NVLink 4 900 GB/s total, B200 / GB200 NVL72 / GB300 NVL72 NVLink 5 1.8 TB/s total). All four are NVSwitch systems
#: with NVLink SHARP (NVSwitch 3 and 4), so their all-reduces may run NVLS.
XLA_SYSTEMS: dict[str, tuple[str, float]] = {
    "sm_90": ("H100 SXM (8, NVSwitch)", 450.0),
    "sm_100_B200": ("B200 (8, NVSwitch)", 900.0),
    "sm_100_GB200": ("GB200 NVL72", 900.0),
    "sm_103": ("GB300 NVL72", 900.0),
}
_XLA_OPS = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter"}
#: DeepBench's all-reduce GPUs: PCIe 3.0 x16 boards (its README: PCIe-era systems).
_DEEPBENCH_GBPS = PCIE_GBPS_PER_LANE[3] * 16
#: DeepBench systems whose all-reduce reaches half the others' bandwidth at every size and GPU count (6 vs 12 GB/s of
#: bus bandwidth between 2 GPUs): their GPUs had no peer-to-peer path, so every transfer was staged through host memory
#: and crossed PCIe twice. DeepBench's sheets do not say which servers these were; prenet reads it from the measurements
#: and labels their link ``pcie_host``, at half the PCIe bandwidth, as it answers a GPU without peer-to-peer.
DEEPBENCH_STAGED = ("NVIDIA Tesla P100", "Nvidia Tesla M40", "Nvidia TitanX")
#: DeepBench's NCCL runs inside one node (2-8 GPUs); its 16/32-GPU rows span nodes over an unnamed network.
_DEEPBENCH_ALGORITHMS = ("NCCL 2.0 Single", "NCCL 2.0 MPI")


def deepbench_allreduce(base: Path) -> pl.DataFrame:
    """DeepBench's NCCL all-reduces inside one node (fp32; ``size_floats`` × 4 bytes) on PCIe 3.0 x16 GPUs, with or
    without peer-to-peer (:data:`DEEPBENCH_STAGED`)."""
    raw = pl.read_csv(base / "external" / "collectives" / "deepbench_allreduce.csv.gz", infer_schema_length=0)
    d = raw.filter(pl.col("algorithm").is_in(list(_DEEPBENCH_ALGORITHMS)) & (pl.col("nodes_unlabeled_col").is_null()))
    return d.select(
        pl.lit("deepbench").alias("source"),
        pl.col("gpu").alias("system"),
        pl.lit("all_reduce").alias("op"),
        pl.col("num_devices").cast(pl.Int64).alias("n"),
        pl.lit(1, dtype=pl.Int64).alias("groups"),
        (pl.col("size_floats").cast(pl.Float64) * 4.0).alias("size_bytes"),
        (pl.col("mean_time_ms").cast(pl.Float64) * 1e3).alias("measured_us"),
        pl.when(pl.col("gpu").is_in(list(DEEPBENCH_STAGED))).then(pl.lit("pcie_host")).otherwise(pl.lit("pcie")).alias("link"),
        pl.when(pl.col("gpu").is_in(list(DEEPBENCH_STAGED))).then(pl.lit(_DEEPBENCH_GBPS / 2)).otherwise(pl.lit(_DEEPBENCH_GBPS)).alias("link_gbps"),
        pl.lit(False).alias("nvls"),
        pl.concat_str(
            [
                pl.lit("deepbench|"),
                pl.col("gpu"),
                pl.lit("|"),
                pl.col("algorithm"),
                pl.lit("|"),
                pl.col("num_devices"),
                pl.lit("|"),
                pl.col("size_floats"),
            ]
        ).alias("key"),
    )


def xla_collectives(base: Path) -> pl.DataFrame:
    """XLA's measured all-reduce / all-gather / reduce-scatter on NVLink systems (F32). ``bytes`` is the output; the
    full tensor is the output for all-reduce and all-gather and ``bytes × n`` for reduce-scatter (its input)."""
    raw = pl.read_csv(base / "external" / "collectives" / "xla_collective_perf_table_nvidia.csv.gz", infer_schema_length=0)
    sys_map = {k: v[0] for k, v in XLA_SYSTEMS.items()}
    bw_map = {k: v[1] for k, v in XLA_SYSTEMS.items()}
    n = pl.col("num_devices_per_group").cast(pl.Int64)
    out_bytes = pl.col("bytes").cast(pl.Float64)
    return raw.select(
        pl.lit("xla").alias("source"),
        pl.col("gpu_key").replace_strict(sys_map).alias("system"),
        pl.col("opcode").replace_strict(_XLA_OPS).alias("op"),
        n.alias("n"),
        pl.col("num_replica_groups").cast(pl.Int64).alias("groups"),
        pl.when(pl.col("opcode") == "reduce-scatter").then(out_bytes * n).otherwise(out_bytes).alias("size_bytes"),
        pl.col("derived_time_us").cast(pl.Float64).alias("measured_us"),
        pl.lit("nvlink").alias("link"),
        pl.col("gpu_key").replace_strict(bw_map, return_dtype=pl.Float64).alias("link_gbps"),
        pl.lit(True).alias("nvls"),
        pl.concat_str(
            [
                pl.lit("xla|"),
                pl.col("gpu_key"),
                pl.lit("|"),
                pl.col("opcode"),
                pl.lit("|"),
                pl.col("num_replica_groups"),
                pl.lit("x"),
                pl.col("num_devices_per_group"),
                pl.lit("|"),
                pl.col("dims"),
            ]
        ).alias("key"),
    )


def measured_collectives(base: Path) -> pl.DataFrame:
    """Every measured collective inside one node or NVLink domain (:func:`deepbench_allreduce`, :func:`xla_collectives`)."""
    return pl.concat([deepbench_allreduce(base), xla_collectives(base)]).filter(pl.col("measured_us") > 0)
