"""Shards of distributed work (prenet.data.shard_files, pipeline.shards): slicing, the hardware guard, resume after a torn
line, atomic promotion and merging, on small real inputs. The multi-process fault tests are in test_distributed.py."""

from __future__ import annotations

import json
import os

import pytest

from prenet.data.shard_files import KEY, append_row, atomic_write_bytes, check_hardware, merge_lines, open_scratch, promote, read_rows, shard_slice
from prenet.errors import PrenetError


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to pretrain (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("pretrain")


def test_shard_slices_cover_every_item_once():
    items = list(range(61))
    parts = [shard_slice(items, k, 4) for k in range(4)]
    assert sorted(sum(parts, [])) == items
    with pytest.raises(PrenetError, match="shard 4 of 4 does not exist"):
        shard_slice(items, 4, 4)


def test_hardware_guard_refuses_other_or_undeclared_hardware():
    assert check_hardware("h100", {"PRENET_HARDWARE": "h100"}) == "h100"
    with pytest.raises(PrenetError, match="created for hardware 'h100' but this machine is PRENET_HARDWARE='cpu'"):
        check_hardware("h100", {"PRENET_HARDWARE": "cpu"})
    with pytest.raises(PrenetError, match="declares no hardware id"):
        check_hardware("h100", {})


def test_scratch_resumes_after_a_torn_line_and_promotes_byte_identical_rows(tmp_path):
    scratch, out = tmp_path / "s.jsonl", tmp_path / "out" / "cpu-0.jsonl"
    fh, done = open_scratch(scratch)
    with fh:
        for k in ("b", "a"):
            append_row(fh, {KEY: k, "x": 0.1 if k == "a" else 2.5})
    first = scratch.read_bytes()
    with scratch.open("ab") as f:  # a kill in the middle of a write
        f.write(b'{"key": "c", "x": 1.')
    assert [r[KEY] for r in read_rows(scratch)] == ["b", "a"]
    fh, done = open_scratch(scratch)
    assert done == {"a", "b"}
    with fh:
        append_row(fh, {KEY: "c", "x": 3.0})
    assert scratch.read_bytes().startswith(first)
    with pytest.raises(PrenetError, match="1 of 4 items are not done"):
        promote(scratch, out, ["a", "b", "c", "d"])
    assert not out.exists()
    assert promote(scratch, out, ["a", "b", "c"]) == 3
    lines = out.read_bytes().splitlines(keepends=True)
    assert [json.loads(x)[KEY] for x in lines] == ["a", "b", "c"]
    assert set(first.splitlines(keepends=True)) <= set(lines)


def test_merge_keeps_each_key_once_sorted(tmp_path):
    for name, keys in (("cpu-0", "ca"), ("cpu-1", "ab")):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({KEY: k, "from": name}) + "\n" for k in keys))
    rows, dropped = merge_lines(sorted(tmp_path.glob("*.jsonl")))
    assert [(r[KEY], r["from"]) for r in rows] == [("a", "cpu-0"), ("b", "cpu-1"), ("c", "cpu-0")] and dropped == 1


def test_a_per_hardware_merge_keeps_every_device(tmp_path):
    """The benchmark times the same keys on every hardware id: its merge keeps one row per (hardware, key)."""
    for hw in ("cpu", "h100"):
        (tmp_path / f"{hw}-0.jsonl").write_text("".join(json.dumps({KEY: k, "hardware": hw}) + "\n" for k in "ab"))
    rows, dropped = merge_lines(sorted(tmp_path.glob("*.jsonl")), per_hardware=True)
    assert [(r["hardware"], r[KEY]) for r in rows] == [("cpu", "a"), ("cpu", "b"), ("h100", "a"), ("h100", "b")] and dropped == 0
    assert len(merge_lines(sorted(tmp_path.glob("*.jsonl")))[0]) == 2


def test_an_interrupted_write_leaves_the_last_good_file(tmp_path, monkeypatch):
    p = atomic_write_bytes(tmp_path / "merged.jsonl", b"good\n")

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(p, b"partial")
    assert p.read_bytes() == b"good\n" and [x.name for x in tmp_path.iterdir()] == ["merged.jsonl"]


def test_shard_stage_runs_resumes_and_promotes_on_the_tiny_corpus(tiny_cfg, tmp_path, monkeypatch):
    """One corpus shard through the stage function: a re-run after promotion resumes everything and re-runs nothing."""
    from omegaconf import OmegaConf

    from pipeline.shard import run_shard
    from pipeline.shards import expected_shards, merge_rows

    cfg = OmegaConf.merge(
        tiny_cfg,
        {
            "paths": {"distributed": str(tmp_path / "dist")},
            "outcome": {
                "corpus": {"domains": ["mlp_digits"], "runs_per_domain": 4, "enrich": {"heavy_ball": {"runs": 0}, "user_loop": {"runs": 0}}}
            },  # 2 prior runs
            "distribute": {"hardware": ["cpu"], "shards": [0, 1], "scratch": str(tmp_path / "scratch")},
        },
    )
    monkeypatch.setenv("PRENET_HARDWARE", "cpu")
    first = run_shard(cfg, "corpus_prior", "cpu", 1)
    assert first["items"] == 1 and first["ran"] == 1
    from pipeline.shard import scratch_path

    done = scratch_path(cfg, "corpus_prior", "cpu", 1)
    assert not done.exists() and done.with_name(done.name + ".done").exists()  # retired after promotion
    again = run_shard(cfg, "corpus_prior", "cpu", 1)  # a re-run (DVC re-runs a stage whose code changed) starts afresh
    assert again["resumed"] == 0 and again["ran"] == 1
    with pytest.raises(PrenetError, match="shards cpu-0 are missing"):
        merge_rows(cfg, "corpus_prior")
    run_shard(cfg, "corpus_prior", "cpu", 0)
    rows, dropped = merge_rows(cfg, "corpus_prior")
    assert len(rows) == 2 and dropped == 0 and all(p.exists() for p in expected_shards(cfg, "corpus_prior"))
    with pytest.raises(PrenetError, match="not in distribute.hardware"):
        run_shard(cfg, "corpus_prior", "cpu", 2)


def test_distribute_without_a_server_is_one_line_exit_2():
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "distribute", "setup"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"},
    )
    err = p.stderr.strip()
    assert p.returncode == 2 and err.count("\n") == 0 and "does not answer" in err and "prefect server start" in err


def test_distribute_refuses_a_matrix_params_yaml_does_not_hold(tiny_cfg):
    from pipeline.distribute import check_matrix

    with pytest.raises(PrenetError, match=r"python -m pipeline.compose distribute.hardware=\[cpu,h100\] distribute.shards=\[0,1,2\]"):
        check_matrix(tiny_cfg, ["cpu", "h100"], 3)


def test_benchmark_and_finetune_shards_merge_into_the_stage_tables(tiny_run, tmp_path, monkeypatch):
    """The other two kinds through the stage functions on the tiny config: the layer benchmark (every shape on each
    hardware id) and the fine-tuning sweep (split over the slots), merged into RawTimings and FinetuneRuns tables
    with as many rows as the single-machine plan."""
    import polars as pl
    from omegaconf import OmegaConf

    from pipeline.merge_shards import merge
    from pipeline.shard import run_shard
    from pipeline.shards import kind

    root, cfg, _ = tiny_run
    c = OmegaConf.merge(
        cfg, {"paths": {"distributed": str(tmp_path / "dist")}, "distribute": {"hardware": ["cpu"], "shards": [0, 1], "scratch": str(tmp_path / "s")}}
    )
    monkeypatch.setenv("PRENET_HARDWARE", "cpu")
    for name, table in (("benchmark", "benchmark_timings.parquet"), ("finetune", "finetune/runs.parquet")):
        planned = len(kind(name).items(c))
        ran = sum(run_shard(c, name, "cpu", k)["items"] for k in (0, 1))
        assert ran == planned
        out = merge(c, name)
        assert out["items"] == planned and out["duplicates_dropped"] == 0
        assert pl.read_parquet(tmp_path / "dist" / table).height == planned
