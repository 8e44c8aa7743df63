"""Step-time prediction (PreNeT): features, per-layer-type regressors, metrics."""

from prenet.steptime.metrics import error_metrics
from prenet.steptime.model import StepTimeModel, fit_step_time_model, select_step_time_model

__all__ = ["StepTimeModel", "error_metrics", "fit_step_time_model", "select_step_time_model"]
