"""Megatron-LM tensor parallelism (Shoeybi et al. 2019) over ``K`` GPUs of one node, on a traced one-GPU step.

In each transformer block the attention's QKV and the MLP's first GEMM are split by columns, the attention output and
the MLP's second GEMM by rows, so every GPU computes 1/K of the block's GEMMs, attention and the elementwise work on
the split tensors (the heads' scores, the MLP's hidden layer); layer norms, residual adds and dropout on the block's
``b × s × h`` stream are repeated on every GPU. The block all-reduces that stream twice in the forward pass (after the
attention and after the MLP) and twice in the backward pass, on the critical path: nothing hides them.

On the trace: an op of a block (:attr:`~prenet.ops.records.StepTrace.blocks`) is split when it is a GEMM, attention
or softmax, or when its output is larger than the block's output (a tensor only a split layer makes); the optimizer
step shrinks with the blocks' share of the parameters. The embedding and the head stay whole (Megatron also splits
the vocabulary: prenet does not, so a large-vocabulary head is over-counted). Data parallelism over the ``world / K``
replicas then all-reduces the (split) gradients as DDP does.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.parallel.data_parallel import Layout, OneGpuStep, ParallelStep, ddp_step
from prenet.parallel.interconnect import Interconnect
from prenet.parallel.model import ParallelModel

#: op families whose work a column/row split divides K ways (GEMMs, attention kernels, the heads' softmax)
SPLIT_FAMILIES = frozenset({"gemm", "attention", "softmax"})


def _in_block(module: str, blocks: list[str]) -> str | None:
    for b in blocks:
        if module == b or module.startswith(b + "."):
            return b
    return None


def split_ops(ops: pl.DataFrame, blocks: list[str], k: int, block_share: float) -> tuple[pl.DataFrame, dict[str, int]]:
    """(``ops`` with ``predicted_ms`` as one of ``k`` tensor-parallel GPUs runs them, each block's output elements)."""
    mods = ops["module"].to_list()
    owner = [_in_block(str(m), blocks) for m in mods]
    phase = ops["phase"].to_numpy()
    out_numel = ops["out_numel"].to_numpy()
    block_out: dict[str, int] = {}
    for b, ph, n in zip(owner, phase, out_numel, strict=True):
        if b is not None and ph == "forward":
            block_out[b] = int(n)  # the last forward op of the block: its output stream
    fam = ops["family"].to_numpy()
    scale = np.ones(ops.height)
    for i, b in enumerate(owner):
        if b is not None and (fam[i] in SPLIT_FAMILIES or out_numel[i] > block_out.get(b, np.inf)):
            scale[i] = 1.0 / k
    scale[phase == "optimizer"] = 1.0 - block_share + block_share / k
    return ops.with_columns((pl.col("predicted_ms") * pl.Series(scale)).alias("predicted_ms")), block_out


def tp_step(one: OneGpuStep, blocks: list[str], layout: Layout, ic: Interconnect, model: ParallelModel, act_bytes: int) -> ParallelStep:
    """The step of ``layout`` (tp:K, then data parallel over the world / K replicas) from the one-GPU step ``one``;
    ``act_bytes``: bytes per element of the blocks' output stream (2 under fp16/bf16 autocast, 4 in fp32/tf32)."""
    from prenet.steptime.host import issue_bound_ms, issued

    if not blocks:
        raise PrenetError("--parallel tp:K splits transformer blocks: the model has no repeated stack of attention blocks; use ddp or fsdp")
    k = layout.tp
    block_params = sum(int(n) for m, n in one.grad_params if _in_block(str(m), blocks) is not None)
    share = block_params / max(sum(int(n) for _, n in one.grad_params), 1)
    ops, block_out = split_ops(one.ops, blocks, k, share)
    compute = issue_bound_ms(ops["predicted_ms"].to_numpy(), issued(ops), one.host_ms) + max(
        one.step_ms - issue_bound_ms(one.ops["predicted_ms"].to_numpy(), issued(one.ops), one.host_ms), 0.0
    )
    # four all-reduces of each block's stream per forward + backward pass, one pass per micro-step
    comm = 4.0 * max(one.micro_steps, 1) * sum(model.collectives.time_ms("all_reduce", n * act_bytes, ic, k) for n in block_out.values())
    grads = [[m, int(n) // k if _in_block(str(m), blocks) is not None else int(n)] for m, n in one.grad_params]
    dp = layout.world // k
    # the K replica groups of a node all-reduce at once: across nodes they share the node's network
    net = layout.network_gbits / k if layout.network_gbits is not None else None
    replicas = ddp_step(
        OneGpuStep(ops, grads, sum(n for _, n in grads), compute, one.precision, one.host_ms, one.micro_steps),
        Layout(gpus=max(layout.gpus // k, 1), nodes=layout.nodes, network_gbits=net),
        ic,
        model,
    )
    notes = [
        f"tensor parallel over {k} GPUs: {len(block_out)} blocks, 4 all-reduces each of {max(block_out.values(), default=0) * act_bytes / 2**20:.1f} MiB per step"
    ]
    if dp > 1:
        notes += [f"data parallel over {dp} replicas of {k} GPUs: their gradients all-reduced as DDP does", *replicas.notes]
    return ParallelStep(
        "tp",
        layout.gpus,
        layout.nodes,
        k,
        compute,
        comm + (replicas.comm_ms if dp > 1 else 0.0),
        comm + (replicas.exposed_ms if dp > 1 else 0.0),
        model.residual.ms(compute, one.precision, layout.world),
        4 * max(one.micro_steps, 1) * len(block_out) + (replicas.collectives if dp > 1 else 0),
        ic.link,
        notes,
    )


def tp_memory_bytes(total_bytes: int, states_bytes: int, grad_params: list[list], blocks: list[str], k: int) -> int:
    """Peak memory per GPU under tp:K (bytes): the one-GPU peak less (1 − 1/K) of the blocks' share of the weights,
    gradients and optimizer state (``states_bytes``); the activations are kept whole (an upper bound: the split
    layers' activations shrink too)."""
    block = sum(int(n) for m, n in grad_params if _in_block(str(m), blocks) is not None)
    share = block / max(sum(int(n) for _, n in grad_params), 1)
    return int(total_bytes - states_bytes * share * (1.0 - 1.0 / k))
