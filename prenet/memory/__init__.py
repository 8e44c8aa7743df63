"""Training memory: the predicted peak of a step (parameters, gradients, optimizer state, saved activations) and
its measurement."""
