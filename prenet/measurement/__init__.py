"""Benchmarking layers on the local device: timer, per-direction steps, resumable runner."""

from prenet.measurement.runner import MeasurementSpec, measurement_plan, run_benchmark
from prenet.measurement.timer import Timing, time_callable

__all__ = ["MeasurementSpec", "Timing", "measurement_plan", "run_benchmark", "time_callable"]
