"""Benchmarking layers on the local device: timer, per-direction steps, resumable runner."""

from prenet.benchmark.runner import MeasurementSpec, make_plan, run_benchmark
from prenet.benchmark.timer import Timing, time_callable

__all__ = ["MeasurementSpec", "Timing", "make_plan", "run_benchmark", "time_callable"]
