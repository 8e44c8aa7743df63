"""What a training step's memory estimate holds (:class:`MemoryEstimate`, bytes) and whether it fits a device; no
torch here, so a stored estimate is read back without importing it (:mod:`prenet.memory.training` predicts it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from prenet.names import AUTOCAST_PRECISIONS

GIB = 2**30
#: What a GPU keeps beyond a step's tensors (GiB): the CUDA context, the caching allocator's slack and library
#: workspaces (cuDNN, cuBLAS).
GPU_RESERVE_GIB = 1.0


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


def fits(estimate_bytes: float, device_gib: float | None, reserve_gib: float = GPU_RESERVE_GIB) -> bool | None:
    """Whether ``estimate_bytes`` plus ``reserve_gib`` (CUDA context, allocator, workspaces) fits in a device of
    ``device_gib``; None when the device's memory is unknown."""
    if device_gib is None:
        return None
    return estimate_bytes + reserve_gib * GIB <= device_gib * GIB


def fit_advice(
    memory: MemoryEstimate,
    device_gib: float,
    *,
    batch_size: int,
    checkpointing: bool,
    precision: str,
    low_precisions: tuple[str, ...] = AUTOCAST_PRECISIONS,
    shards: int = 1,
) -> str:
    """What a user can change when a training step (``memory``: one GPU's whole step, unsharded) does not fit a device
    of ``device_gib``, from what the job already uses and what would help:

    * where the weights, gradients and optimizer state leave room, the activations are what overflow: a smaller batch
      (with ``--grad-accum`` to keep the samples per step) above batch 1; activation checkpointing when off; 16-bit
      autocast (one of ``low_precisions``, those the device runs) when in FP32/TF32 and the activations outweigh the
      16-bit weight copies autocast adds (half the FP32 weights);
    * unless the job already shards that state (``shards``: FSDP's world size, or tensor parallelism's K; the state
      counts per GPU then): ZeRO-3 over the fewest GPUs whose share of it fits beside the activations (``--gpus N
      --parallel fsdp``), where the activations alone fit;
    * larger hardware.

    Where that state alone outgrows the device, the advice says so first: no batch size or precision helps then."""
    import math

    room = (device_gib - GPU_RESERVE_GIB) * GIB
    unsharded = memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes
    rest = memory.total_bytes - unsharded  # activations, the batch, what backward holds
    state = unsharded / shards  # one GPU's share under FSDP (its world) or tensor parallelism (its K)
    sharded = shards > 1
    ways = []
    if state < room:
        if batch_size > 1:
            ways.append("a smaller --batch-size (activations scale with it; --grad-accum K keeps the samples per step)")
        if not checkpointing:
            ways.append("--checkpointing (recompute activations in the backward pass)")
        if precision in ("fp32", "tf32") and low_precisions and memory.activations_bytes > memory.weights_bytes:
            ways.append(f"--precision {' or '.join(low_precisions)} (16-bit activations)")
    if not sharded and state > 0 and rest < room:
        n = max(2, math.ceil(state / (room - rest)))
        ways.append(
            f"--gpus {n} --parallel fsdp (ZeRO-3 shards the {state / GIB:.1f} GiB of weights, gradients and optimizer "
            f"state: {state / n / GIB:.1f} GiB a GPU)"
        )
    ways.append("larger hardware")
    lead = f"its weights, gradients and optimizer state alone take {state / GIB:.1f} GiB; " if state >= room else ""
    return lead + "use " + ", or ".join(ways)
