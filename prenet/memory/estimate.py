"""What a training step's memory estimate holds (:class:`MemoryEstimate`, bytes) and whether it fits a device; no
torch here, so a stored estimate is read back without importing it (:mod:`prenet.memory.training` predicts it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak memory of one training step, by component (bytes).

    ``activations_bytes``: all tensors saved for backward (alive when backward starts); ``backward_live_bytes``: the
    most that saved tensors and the gradients formed so far hold together at any point of the backward pass (the
    gradient of a layer's parameters appears as the layer's saved tensors are freed, so early layers with many
    parameters — embeddings — do not stack on all activations); ``transient_bytes``: the gradient being formed."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    inputs_bytes: int
    activations_bytes: int
    backward_live_bytes: int
    transient_bytes: int

    @property
    def total_bytes(self) -> int:
        """weights + batch + optimizer state + max(backward's live tensors + transient, all gradients)."""
        return (
            self.weights_bytes + self.inputs_bytes + self.optimizer_bytes + max(self.backward_live_bytes + self.transient_bytes, self.gradients_bytes)
        )

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def fits(estimate_bytes: float, device_gib: float | None, reserve_gib: float = 1.0) -> bool | None:
    """Whether ``estimate_bytes`` plus ``reserve_gib`` (CUDA context, allocator, workspaces) fits in a device of
    ``device_gib``; None when the device's memory is unknown."""
    if device_gib is None:
        return None
    return estimate_bytes + reserve_gib * GIB <= device_gib * GIB


def fit_advice(batch_size: int, *, checkpointing: bool, precision: str) -> str:
    """What a user can change when a training step does not fit, from what the job already uses: a smaller batch
    (with ``--grad-accum`` to keep the samples per step) only above batch 1; activation checkpointing when off; 16-bit
    activations when in FP32/TF32; else larger hardware (the weights, gradients and optimizer state alone do not fit)."""
    ways = []
    if batch_size > 1:
        ways.append("a smaller --batch-size (activations scale with it; --grad-accum K keeps the samples per step)")
    if not checkpointing:
        ways.append("--checkpointing (recompute activations in the backward pass)")
    if precision in ("fp32", "tf32"):
        ways.append("--precision bf16 or fp16 (16-bit activations)")
    ways.append("larger hardware")
    return "use " + ", or ".join(ways)
