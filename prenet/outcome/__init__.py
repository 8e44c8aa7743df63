"""Early success: from one run's first epochs of telemetry, its final test accuracy, failure and relative rank."""

from prenet.outcome.predict import Outcome, predict

__all__ = ["Outcome", "predict"]
