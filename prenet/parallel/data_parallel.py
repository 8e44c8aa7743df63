"""A training step on several GPUs: data parallel (DDP), fully sharded (FSDP / ZeRO-3) and tensor parallel (Megatron).

Every strategy starts from the one-GPU step that :mod:`prenet.steptime.step` predicts (its per-op table, in issue
order) and adds what the GPUs exchange (:mod:`prenet.parallel.collectives`), less what hides behind compute:

* **ddp** (PyTorch ``DistributedDataParallel``): gradients are all-reduced in buckets (the first 1 MiB, then 25 MiB,
  filled in reverse registration order, as DDP assigns them). A bucket's all-reduce starts once its last gradient is
  formed in the backward pass and the previous bucket's is done (one communication stream); the optimizer step waits
  for the last. Exposed = the communication that ends after the backward pass.
* **fsdp** (ZeRO-3): each GPU holds 1/N of the parameters, gradients and optimizer state; every forward and backward
  all-gathers the parameters and the backward reduce-scatters the gradients. They are prefetched one unit ahead, so
  communication hides behind compute unless it is longer (exposed = max(0, comm − compute) per pass, plus the first
  all-gather).
* **tp:K** (Megatron-LM): the repeated transformer blocks split K ways, four all-reduces of their activations per
  block and step on the critical path (:mod:`prenet.parallel.tensor_parallel`).

A learned residual (:class:`SyncResidual`) adds what measured data-parallel steps lose beyond the collectives
(stragglers, input pipelines, clocks under load), as a share of the one-GPU step, fitted on DeepLearningExamples'
1 → 8 GPU throughput tables.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.parallel.interconnect import DEFAULT_NETWORK_GBITS, Interconnect
from prenet.parallel.model import ParallelModel

STRATEGIES = ("ddp", "fsdp", "tp")
MIB = 2**20
#: DDP's bucket caps (bytes): ``dist._DEFAULT_FIRST_BUCKET_BYTES`` and ``bucket_cap_mb=25``.
DDP_FIRST_BUCKET, DDP_BUCKET = 1 * MIB, 25 * MIB
#: Bytes per gradient element as DDP all-reduces it: torch.autocast keeps FP32 parameters, so FP32 gradients.
GRAD_BYTES = 4


@dataclass
class Layout:
    """How a job is spread: ``gpus`` per node, ``nodes``, the ``strategy`` (:data:`STRATEGIES`) and its tensor-parallel
    degree ``tp`` (1 unless tp), the node's ``network_gbits`` (Gb/s; None on one node)."""

    gpus: int = 1
    nodes: int = 1
    strategy: str = "ddp"
    tp: int = 1
    network_gbits: float | None = None

    @property
    def world(self) -> int:
        return self.gpus * self.nodes

    @property
    def data_parallel(self) -> int:
        """GPUs that each hold a different part of the batch (all but the tensor-parallel ones)."""
        return self.world // self.tp


def parse_parallel(text: str) -> tuple[str, int]:
    """``ddp`` | ``fsdp`` | ``tp:K`` → (strategy, tensor-parallel degree)."""
    if text in STRATEGIES and text != "tp":
        return text, 1
    if text.startswith("tp:") and text[3:].isdigit() and int(text[3:]) >= 1:
        return "tp", int(text[3:])
    raise PrenetError(f"--parallel {text!r} is not one of ddp, fsdp, tp:K (K a positive integer, e.g. tp:2)")


def check_layout(layout: Layout, ic: Interconnect, hardware_id: str, heads: int | None = None) -> list[str]:
    """Raise on a layout the hardware cannot hold; return the notes an answer must carry (assumed links, network)."""
    if layout.gpus < 1 or layout.nodes < 1:
        raise PrenetError(f"--gpus and --nodes must be positive integers, got {layout.gpus} and {layout.nodes}")
    if layout.gpus > ic.gpus_per_node:
        raise PrenetError(
            f"--gpus {layout.gpus}: a {hardware_id} node holds at most {ic.gpus_per_node} GPUs; use --gpus {ic.gpus_per_node} --nodes {math.ceil(layout.gpus / ic.gpus_per_node)}"
        )
    if layout.strategy == "tp":
        if layout.tp > layout.gpus:
            raise PrenetError(f"--parallel tp:{layout.tp} needs {layout.tp} GPUs in a node; --gpus is {layout.gpus}")
        if layout.gpus % layout.tp:
            raise PrenetError(f"--parallel tp:{layout.tp} does not divide --gpus {layout.gpus}; choose a divisor")
        if heads is not None and heads % layout.tp:
            raise PrenetError(f"--parallel tp:{layout.tp} does not divide the model's {heads} attention heads; choose a divisor of {heads}")
    notes = []
    if layout.strategy == "tp" and heads is None:
        notes.append(f"tp:{layout.tp}: the model's attention heads were not found, so whether {layout.tp} divides them was not checked")
    if layout.world > 1 and ic.assumed:
        notes.append(f"{hardware_id} has no interconnect spec in the catalog: PCIe 3.0 x16 with peer-to-peer was assumed")
    if layout.world > 1 and not ic.p2p and not ic.nvlink_gbps:
        notes.append(f"{hardware_id} has no peer-to-peer: every transfer between its GPUs is staged through host memory")
    if layout.nodes > 1 and layout.network_gbits is None:
        layout.network_gbits = DEFAULT_NETWORK_GBITS
        notes.append(f"between nodes: {DEFAULT_NETWORK_GBITS:g} Gb/s per node assumed (set --network)")
    return notes


@dataclass(frozen=True)
class OneGpuStep:
    """The one-GPU step a layout starts from: its op table in issue order (``predicted_ms``, ``phase``, ``module``),
    the trace's trainable parameters (``StepTrace.grad_params``) and their count, the step (ms), its precision, the
    host's cost per issued op (ms) and the micro-steps of gradient accumulation."""

    ops: pl.DataFrame
    grad_params: list[list]
    params: int
    step_ms: float
    precision: str
    host_ms: float = 0.0
    micro_steps: int = 1  # forward + backward passes per optimizer step (gradient accumulation)


@dataclass
class ParallelStep:
    """One step of a multi-GPU job (ms): ``compute_ms`` the one-GPU step of its share of the work, ``comm_ms`` all of
    its collectives, ``exposed_ms`` the part of them the step waits for, ``sync_ms`` the learned residual;
    ``step_ms`` = compute + exposed + sync."""

    strategy: str
    gpus: int
    nodes: int
    tp: int
    compute_ms: float
    comm_ms: float
    exposed_ms: float
    sync_ms: float
    collectives: int
    link: str
    notes: list[str] = field(default_factory=list)
    memory_bytes_per_gpu: int | None = None

    @property
    def step_ms(self) -> float:
        return self.compute_ms + self.exposed_ms + self.sync_ms

    @property
    def hidden_share(self) -> float:
        """Share of the communication hidden behind compute (1: all of it)."""
        return 1.0 - self.exposed_ms / self.comm_ms if self.comm_ms > 0 else 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "step_ms": self.step_ms, "hidden_share": self.hidden_share}


def _timeline(ops: pl.DataFrame, host_ms: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(end time of each op on the device, is-backward mask, end of forward, end of backward), ms from the step's
    start, as the host issues the ops at ``host_ms`` each (:func:`prenet.steptime.host.op_end_ms`)."""
    from prenet.steptime.host import issued, op_end_ms

    t = op_end_ms(ops["predicted_ms"].to_numpy(), issued(ops), host_ms)
    phase = ops["phase"].to_numpy()
    bwd = phase == "backward"
    fwd_end = float(t[phase == "forward"][-1]) if (phase == "forward").any() else 0.0
    bwd_end = float(t[bwd][-1]) if bwd.any() else fwd_end
    return t, bwd, fwd_end, bwd_end


def grad_ready_ms(ops: pl.DataFrame, grad_params: list[list], host_ms: float = 0.0) -> np.ndarray:
    """When each parameter's gradient is formed (ms from the step's start): the end of the last backward op of its
    module (or of a module inside it); a parameter whose module has no backward op is ready at the backward's end."""
    t, bwd, _, bwd_end = _timeline(ops, host_ms)
    last: dict[str, float] = {}  # module → the last backward op's end in it or in a module inside it
    for m, end in zip(ops["module"].to_numpy()[bwd], t[bwd], strict=True):
        parts = str(m).split(".")
        for k in range(1, len(parts) + 1):
            key = ".".join(parts[:k])
            last[key] = max(last.get(key, 0.0), float(end))
    return np.array([last.get(mod, bwd_end) for mod, _ in grad_params], dtype=float)


def ddp_buckets(numels: list[int], order: list[int] | None = None, first_cap: int = DDP_FIRST_BUCKET, cap: int = DDP_BUCKET) -> list[list[int]]:
    """Indices of the parameters in each DDP bucket, as ``_compute_bucket_assignment_by_size`` fills them: parameters
    in ``order`` (default: reverse registration order; DDP rebuilds its buckets after the first step in the order the
    gradients became ready), each appended to the open bucket, which closes once it holds at least its cap (the first
    ``first_cap`` bytes, the others ``cap``)."""
    buckets: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i in order if order is not None else reversed(range(len(numels))):
        cur.append(i)
        size += numels[i] * GRAD_BYTES
        if size >= (first_cap if not buckets else cap):
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    return buckets


def _grad_params(ops: pl.DataFrame, grad_params: list[list], params: int) -> list[list]:
    """The trace's trainable parameters; a trace without them (an older store entry) is one parameter per 25 MiB,
    formed evenly over the backward pass (notes say so)."""
    if grad_params:
        return grad_params
    per = DDP_BUCKET // GRAD_BYTES
    return [["", min(per, params - i)] for i in range(0, max(params, 1), per)]


def ddp_step(one: OneGpuStep, layout: Layout, ic: Interconnect, model: ParallelModel) -> ParallelStep:
    """Data-parallel step (module docstring) from the one-GPU step ``one``."""
    ops, grad_params, step_ms, host_ms = one.ops, one.grad_params, one.step_ms, one.host_ms
    gp = _grad_params(ops, grad_params, one.params)
    ready = grad_ready_ms(ops, gp, host_ms) if grad_params else None
    _, _, fwd_end, bwd_end = _timeline(ops, host_ms)
    numels = [int(n) for _, n in gp]
    # the order the gradients become ready (DDP's rebuilt buckets); ties in reverse registration order
    order = sorted(reversed(range(len(numels))), key=lambda i: ready[i]) if ready is not None else None
    buckets = ddp_buckets(numels, order)
    done = 0.0
    comm = 0.0
    for k, idx in enumerate(buckets):
        size = sum(numels[i] for i in idx) * GRAD_BYTES
        r = max(ready[i] for i in idx) if ready is not None else fwd_end + (bwd_end - fwd_end) * (k + 1) / len(buckets)
        t = model.collectives.time_ms("all_reduce", size, ic, layout.gpus, layout.nodes, layout.network_gbits)
        done = max(done, r) + t
        comm += t
    exposed = float(max(0.0, done - bwd_end)) if layout.world > 1 else 0.0
    notes = [] if grad_params else ["the stored trace lists no parameters: gradients were taken as formed evenly over the backward pass"]
    return ParallelStep(
        "ddp",
        layout.gpus,
        layout.nodes,
        1,
        step_ms,
        comm,
        exposed,
        model.residual.ms(step_ms, one.precision, layout.world),
        len(buckets) if layout.world > 1 else 0,
        ic.link,
        notes,
    )


def fsdp_step(one: OneGpuStep, layout: Layout, ic: Interconnect, model: ParallelModel, units: int) -> ParallelStep:
    """ZeRO-3 step (module docstring) from the one-GPU step ``one``: ``units`` wrapped units, each a gather of 1/units
    of the FP32 parameters, in every forward and backward pass of each of the step's ``micro_steps`` (gradient
    accumulation gathers again per micro-step); each pass hides its gathers behind its own compute."""
    step_ms = one.step_ms
    if layout.world == 1:
        return ParallelStep("fsdp", 1, 1, 1, step_ms, 0.0, 0.0, 0.0, 0, ic.link)
    k = max(one.micro_steps, 1)
    phase = one.ops["phase"].to_numpy()
    ms = one.ops["predicted_ms"].to_numpy()
    fwd_t, bwd_t = float(ms[phase == "forward"].sum()) / k, float(ms[phase == "backward"].sum()) / k  # per micro-step
    unit = one.params * GRAD_BYTES / max(units, 1)
    ag = model.collectives.time_ms("all_gather", unit, ic, layout.gpus, layout.nodes, layout.network_gbits)
    rs = model.collectives.time_ms("reduce_scatter", unit, ic, layout.gpus, layout.nodes, layout.network_gbits)
    fwd_comm, bwd_comm = units * ag, units * (ag + rs)
    exposed = float(k * (ag + max(0.0, fwd_comm - ag - fwd_t) + max(0.0, bwd_comm - bwd_t)))
    notes = [f"FSDP: {units} units (one per module that owns parameters), FP32 parameters gathered ({k} micro-step(s) per step)"]
    return ParallelStep(
        "fsdp",
        layout.gpus,
        layout.nodes,
        1,
        step_ms,
        k * (fwd_comm + bwd_comm),
        exposed,
        model.residual.ms(step_ms, one.precision, layout.world),
        3 * units * k,
        ic.link,
        notes,
    )


def fsdp_units(grad_params: list[list]) -> int:
    """FSDP units of a model: one per module that owns parameters (auto-wrapping wraps each block; a unit per owning
    module bounds it from above), at most 100."""
    return max(1, min(100, len({m for m, _ in grad_params})))


def multi_gpu_step(one: OneGpuStep, layout: Layout, ic: Interconnect, model: ParallelModel) -> ParallelStep:
    """The step of ``layout`` (ddp | fsdp) from the one-GPU step ``one``."""
    if layout.strategy == "ddp":
        return ddp_step(one, layout, ic, model)
    if layout.strategy == "fsdp":
        return fsdp_step(one, layout, ic, model, fsdp_units(one.grad_params))
    raise PrenetError(f"--parallel {layout.strategy}: use prenet.parallel.answer.layout_step (tensor parallelism needs the trace's blocks)")
