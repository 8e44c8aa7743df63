"""Steps to converge without training (Zancato et al., NeurIPS 2020): the fine-tuning loss curve predicted from
the linearized network's dynamics in function space, driven by the empirical NTK at the pre-trained weights.

    from prenet.convergence import forecast
    fc = forecast(model, inputs, labels, loss="cross_entropy", lr=0.01, momentum=0.9, batch_size=64, steps=500)
    fc.steps_to_converge(0.1), fc.steps_to_loss(0.3), fc.steps_to_accuracy(0.95), fc.drift, fc.reliable, fc.seconds
"""

from prenet.convergence.forecaster import Forecast, forecast
from prenet.convergence.ntk import NTK, ProblemTooLargeError, empirical_ntk

__all__ = ["NTK", "Forecast", "ProblemTooLargeError", "empirical_ntk", "forecast"]
