"""pipeline.pool: work items in input order, each process at the stage's thread count, the caller's environment
left as it was."""

from __future__ import annotations

import os

import pytest

from pipeline.pool import in_background, run_items


def _threads_seen(item: int) -> tuple[int, str | None]:
    return item, os.environ.get("OMP_NUM_THREADS")


def test_in_process_items_see_the_thread_count_and_the_caller_keeps_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    out = list(run_items(_threads_seen, [3, 1, 2], workers=1, threads=1, desc="t", progress=False))
    assert out == [(3, "1"), (1, "1"), (2, "1")]
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "MKL_NUM_THREADS" not in os.environ


def test_spawned_workers_keep_input_order_and_set_their_own_threads() -> None:
    before = os.environ.get("OMP_NUM_THREADS")
    out = list(run_items(_threads_seen, [5, 4, 6, 0], workers=2, threads=1, desc="t", progress=False))
    assert out == [(5, "1"), (4, "1"), (6, "1"), (0, "1")]
    assert os.environ.get("OMP_NUM_THREADS") == before


def test_background_work_runs_in_its_own_process_at_the_thread_count() -> None:
    with in_background(_pid_and_threads, 2, threads=1) as job:
        here = os.getpid()
    pid, item, threads = job.result()
    assert (item, threads) == (2, "1") and pid != here


def test_a_failing_block_stops_its_background_work_instead_of_waiting_for_it() -> None:
    """train's baseline fit runs beside the configured model's: when that fit raises, the stage fails at once."""
    import time

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="the main fit failed"):
        with in_background(time.sleep, 60, threads=1):
            raise ValueError("the main fit failed")
    assert time.monotonic() - t0 < 30  # not the 60 s the background sleep would take


def _pid_and_threads(item: int) -> tuple[int, int, str | None]:
    return os.getpid(), item, os.environ.get("OMP_NUM_THREADS")
