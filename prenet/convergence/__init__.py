"""Steps to converge without training (Zancato et al., NeurIPS 2020): the fine-tuning loss curve predicted from
the linearized network's dynamics in function space, driven by the empirical NTK at the pre-trained weights.

    from prenet.convergence import forecast
    fc = forecast(model, inputs, labels, loss="cross_entropy", lr=0.01, momentum=0.9, batch_size=64, steps=500)
    fc.steps_to_converge(0.1), fc.steps_to_loss(0.3), fc.steps_to_accuracy(0.95), fc.drift, fc.reliable, fc.seconds

The names below are imported on first use, so the torch-free modules (``baselines``, ``evaluation``) load without
torch.
"""

from typing import Any

__all__ = ["NTK", "DearerWarning", "Forecast", "ProblemTooLargeError", "empirical_ntk", "forecast"]


def __getattr__(name: str) -> Any:
    if name in ("DearerWarning", "Forecast", "forecast"):
        from prenet.convergence import forecaster

        return getattr(forecaster, name)
    if name in ("NTK", "ProblemTooLargeError", "empirical_ntk"):
        from prenet.convergence import ntk

        return getattr(ntk, name)
    raise AttributeError(f"module 'prenet.convergence' has no attribute {name!r}")
