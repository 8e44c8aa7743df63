"""Memory per GPU when the model states are sharded (FSDP / ZeRO-3), in bytes."""

from __future__ import annotations


def zero3_model_state_bytes(params: int, gpus: int, param_bytes: int = 4, grad_bytes: int = 4, optimizer_bytes: int = 8) -> float:
    """Model-state memory per GPU under ZeRO-3 / FSDP (bytes): (param + grad + optimizer bytes per parameter) · Ψ / N
    (Rajbhandari et al. 2020, eq. for P_os+g+p: (2 + 2 + K) Ψ / N_d in their mixed-precision Adam setting)."""
    return (param_bytes + grad_bytes + optimizer_bytes) * params / gpus


def fsdp_memory_bytes(total_bytes: int, weights: int, gradients: int, optimizer: int, gpus: int, units: int) -> int:
    """Peak memory per GPU under FSDP (bytes): the one-GPU peak with weights, gradients and optimizer state sharded N
    ways (:func:`zero3_model_state_bytes`'s accounting) plus two gathered units (the one computing, the one prefetched)."""
    states = weights + gradients + optimizer
    return int(total_bytes - states + states / gpus + 2 * weights / max(units, 1))
