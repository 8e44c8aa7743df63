"""The host's side of a GPU training step. PyTorch's eager mode issues every op from one CPU thread (Python, the
dispatcher, autograd, the kernel launch) while the GPU runs the ops issued before; the GPU never starts an op before
it is issued, nor before the op ahead of it ends. With a host cost ``h`` per issued op and GPU times ``g_1..g_n`` in
issue order, the step ends at

    step_ms = max over i of ( k_i·h + g_i + g_{i+1} + … + g_n )      (issue time of op i + the GPU work left)

(k_i: the ops the host has issued up to op i): h + Σ g when the GPU is the bottleneck (large batches), ≈ n·h when
the host is (small batches of a model of many small ops: pytorch-gpu-benchmark's ShuffleNet and MnasNet steps take
28–40 ms on every GPU from a GTX 1080 Ti to an A100). ``h`` is fitted by ``train_ops`` on measured whole-model GPU steps of architectures kept out of every test set
(:data:`HOST_CALIBRATION`), and stored with the op models. cuDNN's layout transposes and a convolution backward's
second kernel run inside the call that issues them: GPU time, no host cost of their own (:func:`issued`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from prenet.ops.families import LAYOUT_TRANSPOSES

#: pytorch-gpu-benchmark architectures whose measured steps fit the host cost: DenseNets (hundreds of small
#: convolutions, concatenations and norms) and SqueezeNets (small convolutions); the ResNets and VGGs stay a test set
HOST_CALIBRATION = ("densenet121", "densenet161", "densenet169", "densenet201", "squeezenet1_0", "squeezenet1_1")
#: the host costs tried by :func:`fit_host_ms` (ms per issued op): 0 to 150 µs
HOST_GRID_MS = np.arange(0.0, 0.1505, 0.0005)


def issued(ops: pl.DataFrame) -> np.ndarray:
    """1 for each op (row, in issue order) the host issues, 0 for what cuDNN runs inside a call the host issued once:
    the layout transposes around a convolution, and a backward's second kernel (a CUDA trace records backward-data and
    backward-filter of one ``convolution_backward`` call as two rows, one after the other, same module and shapes)."""
    op = pl.col("op")
    second_pass = (
        (op == "convolution_backward")
        & (op.shift(1) == "convolution_backward")
        & (pl.col("module") == pl.col("module").shift(1))
        & (pl.col("shapes") == pl.col("shapes").shift(1))
    ).fill_null(False)
    inside = ops.select(op.is_in(list(LAYOUT_TRANSPOSES)) | second_pass).to_series()
    return (~inside).to_numpy().astype(float)


def issue_bound_ms(gpu_ms: np.ndarray, issued_ops: np.ndarray, host_ms: float) -> float:
    """The step (ms) of ops with GPU times ``gpu_ms`` in issue order, ``issued_ops`` (1/0) of them issued by the host at
    ``host_ms`` each (see the module docstring); Σ ``gpu_ms`` when ``host_ms`` is 0."""
    g = np.asarray(gpu_ms, dtype=float)
    if host_ms <= 0 or g.size == 0:
        return float(g.sum())
    issue = np.cumsum(np.asarray(issued_ops, dtype=float) * host_ms)
    remaining = np.cumsum(g[::-1])[::-1]
    return float(np.max(issue + remaining))


def op_end_ms(gpu_ms: np.ndarray, issued_ops: np.ndarray, host_ms: float) -> np.ndarray:
    """When each op ends on the GPU (ms from the step's start): it starts once issued and once the op ahead of it has
    ended, ``end_i = max(end_(i-1), issue_i) + g_i``; the last is :func:`issue_bound_ms`."""
    g = np.asarray(gpu_ms, dtype=float)
    issue = np.cumsum(np.asarray(issued_ops, dtype=float) * max(host_ms, 0.0))
    end = np.empty_like(g)
    t = 0.0
    for i in range(g.size):
        t = max(t, issue[i]) + g[i]
        end[i] = t
    return end


def fit_host_ms(steps: Sequence[tuple[float, np.ndarray, np.ndarray, float]]) -> tuple[float, float]:
    """(host ms per issued op, MAPE %) over measured steps ``(measured_ms, gpu_ms, issued, extra_ms)`` (``extra_ms``: time
    outside the ops, e.g. the batch's copy): the grid value (:data:`HOST_GRID_MS`) of least mean absolute % error."""
    if not steps:
        return 0.0, float("nan")
    best = (0.0, float("inf"))
    for h in HOST_GRID_MS:  # the grid's top is far above any eager PyTorch host (tens of µs per op)
        ape = [abs(issue_bound_ms(g, iss, float(h)) + extra - meas) / meas for meas, g, iss, extra in steps]
        mape = 100.0 * float(np.mean(ape))
        if mape < best[1] - 1e-9:
            best = (float(h), mape)
    return best
