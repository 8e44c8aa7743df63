"""Memory per GPU when the model states are sharded (FSDP / ZeRO-3), in bytes."""

from __future__ import annotations


def fsdp_memory_bytes(total_bytes: int, weights: int, gradients: int, optimizer: int, gpus: int, units: int) -> int:
    """Peak memory per GPU under FSDP (bytes): the one-GPU peak with weights, gradients and optimizer state sharded N
    ways (ZeRO-3's (param + grad + optimizer bytes) Ψ / N) plus two gathered units (the one computing, the one
    prefetched)."""
    states = weights + gradients + optimizer
    return int(total_bytes - states + states / gpus + 2 * weights / max(units, 1))


def ddp_memory_bytes(total_bytes: int, gradients: int) -> int:
    """Peak memory per GPU under DDP (bytes): the one-GPU peak plus DDP's gradient buckets, a flat copy of every
    gradient (``gradient_as_bucket_view=False``, the default)."""
    return int(total_bytes + gradients)
