"""Per-epoch training telemetry for any torch training loop (the early-success predictor's input).

    rec = Recorder(model, probe_inputs=X_probe, optimizer=opt)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward()
            rec.after_backward(loss)
            opt.step()
        rec.end_epoch(train_loss=..., train_accuracy=...)
    rec.table()            # polars frame, one row per epoch, validated (prenet.data.schemas.Telemetry)

Definitions (all per epoch, over the epoch's minibatches):

* **gradient SNR** — for each parameter element i, the mean ḡᵢ and variance vᵢ of its minibatch gradients over the
  epoch. ``grad_snr`` = Σᵢ ḡᵢ² / Σᵢ vᵢ (energy of the mean gradient over the total gradient noise: one number,
  dominated by the parameters with large gradients), ``grad_snr_median`` = the (lower) median over elements of ḡᵢ²/vᵢ
  (the typical parameter). Both as log10 in the table (``log10_grad_snr``, ``log10_grad_snr_median``); vᵢ uses the
  unbiased estimator and an epoch needs ≥ 2 minibatches. ``grad_norm`` = mean over minibatches of ‖g‖₂.
* **weight-norm growth** — ``weight_norm_ratio`` = ‖w_t‖/‖w_0‖ over all parameters (w_0 = the weights when the
  recorder was made); ``weight_distance`` = ‖w_t − w_0‖/‖w_0‖; per layer (each parameter tensor of ≥ 2 dimensions,
  i.e. weight matrices and kernels): ``layer_norm_ratio_max`` and ``layer_norm_ratio_mean`` of ‖w_l,t‖/‖w_l,0‖.
* **update/weight ratio** — ``update_ratio`` = ‖w_t − w_{t−1}‖/‖w_{t−1}‖ over all parameters, this epoch's
  relative step (w_{t−1} = the weights at the previous epoch's end, or at construction).
* **within the epoch** — from the minibatch losses passed to ``after_backward`` (optional) and the minibatch gradient
  norms, split into quarters of the epoch's minibatches (an epoch needs ≥ 4): ``loss_end`` = mean minibatch loss over
  the last quarter (nats: where the loss is at the epoch's end, where ``train_loss`` is the epoch's mean),
  ``loss_trend`` = ln(last quarter's mean loss / first quarter's) (< 0: falling within the epoch; a plateau that
  starts to fall shows here before the epoch means move), ``grad_norm_trend`` = ln(last quarter's mean ‖g‖₂ / first
  quarter's). Null when not measured: fewer than 4 minibatches, a loss not passed for every minibatch, or a value
  not finite.
* **validation** (optional) — ``val_loss`` (nats) and ``val_accuracy`` as passed to ``end_epoch``; null when not
  given. With them the early-success features include the train–validation gap.
* **the optimizer** (when the recorder is given it) — ``lr`` = the mean learning rate of the epoch's minibatch steps
  (read at each ``after_backward``, so a schedule shows), ``momentum`` = its heavy-ball momentum (SGD, RMSprop) or
  β₁ (Adam, AdamW), ``adaptive`` = 1 for an optimizer that scales each step by its gradients' second moment (Adam,
  AdamW, RMSprop, Adagrad, …), 0 for SGD, null for another (LBFGS, Rprop, a wrapper). Read off the first parameter
  group; null without an optimizer, and ``lr`` null where it is not a positive number (e.g. Adafactor's relative step).
* **activation saturation** at every epoch end (or only at ``snapshot_epoch`` when one is given) — the probe batch is run through the model (eval mode,
  no gradients) with hooks on every ReLU, Tanh and Sigmoid module: ``dead_relu_frac`` = share of ReLU units
  (a unit = one feature or one channel) that output 0 for every probe sample; ``saturated_frac`` = share of tanh
  outputs with |a| > ``saturation_threshold`` and of sigmoid outputs with |2a − 1| > ``saturation_threshold``
  (default 0.99). Null when the model has no such modules (or, with ``snapshot_epoch``, in the other epochs' rows).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

SATURATION_THRESHOLD = 0.99


@dataclass
class _Moments:
    count: int = 0
    s1: list[torch.Tensor] = field(default_factory=list)
    s2: list[torch.Tensor] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)


class Recorder:
    """Collects gradient moments after each backward pass and, at each epoch end, the weight norms and (at
    ``snapshot_epoch``) the activation saturation on ``probe_inputs``; with ``optimizer``, its learning rate and momentum
    (read, never changed). ``seconds`` is the recorder's own wall time."""

    def __init__(
        self,
        model: nn.Module,
        *,
        probe_inputs: torch.Tensor | None = None,
        snapshot_epoch: int | None = None,
        saturation_threshold: float = SATURATION_THRESHOLD,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters to record")
        self.probe_inputs = probe_inputs
        self.snapshot_epoch = snapshot_epoch
        self.saturation_threshold = saturation_threshold
        with torch.no_grad():
            self.w0 = [p.detach().clone() for p in self.params]
            self.w0_norm = math.sqrt(sum(float((w.double() ** 2).sum()) for w in self.w0))
            self.layer_w0 = [float(w.double().norm()) for w in self.w0]
            self.w_prev = [w.clone() for w in self.w0]
        self.rows: list[dict] = []
        self.seconds = 0.0
        self._m = self._fresh()

    def _fresh(self) -> _Moments:
        return _Moments(
            0, [torch.zeros_like(p, dtype=torch.float32) for p in self.params], [torch.zeros_like(p, dtype=torch.float32) for p in self.params], []
        )

    def after_backward(self, loss: torch.Tensor | float | None = None) -> None:
        """Call right after ``loss.backward()`` (before the optimizer step), with the minibatch's loss (a tensor or a
        number, in nats) for the within-epoch loss features."""
        t0 = time.perf_counter()
        if loss is not None:
            self._m.losses.append(float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss))
        if self.optimizer is not None and self.optimizer.param_groups and (lr := _number(self.optimizer.param_groups[0].get("lr"))) is not None:
            self._m.lrs.append(lr)
        with torch.no_grad():
            sq = 0.0
            for p, a, b in zip(self.params, self._m.s1, self._m.s2):
                if p.grad is None:
                    continue
                g = p.grad.detach().float()
                a.add_(g)
                b.addcmul_(g, g)
                sq += float((g * g).sum())
            self._m.count += 1
            self._m.norms.append(math.sqrt(sq))
        self.seconds += time.perf_counter() - t0

    def _saturation(self) -> tuple[float | None, float | None]:
        if self.probe_inputs is None:
            return None, None
        relu_units, dead = 0, 0
        sat_n, sat_total = 0, 0
        thr = self.saturation_threshold
        handles = []

        def relu_hook(_m, _i, out):
            nonlocal relu_units, dead
            o = out.detach()
            alive = (o > 0).reshape(o.shape[0], o.shape[1], -1).any(dim=2).any(dim=0) if o.dim() > 2 else (o > 0).any(dim=0)
            relu_units += alive.numel()
            dead += int((~alive).sum())

        def bounded_hook(kind):
            def hook(_m, _i, out):
                nonlocal sat_n, sat_total
                o = out.detach()
                s = o.abs() > thr if kind == "tanh" else (2 * o - 1).abs() > thr
                sat_n += int(s.sum())
                sat_total += s.numel()

            return hook

        for m in self.model.modules():
            if isinstance(m, nn.ReLU):
                handles.append(m.register_forward_hook(relu_hook))
            elif isinstance(m, nn.Tanh):
                handles.append(m.register_forward_hook(bounded_hook("tanh")))
            elif isinstance(m, nn.Sigmoid):
                handles.append(m.register_forward_hook(bounded_hook("sigmoid")))
        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                self.model(self.probe_inputs)
        finally:
            for h in handles:
                h.remove()
            self.model.train(was)
        return (dead / relu_units if relu_units else None), (sat_n / sat_total if sat_total else None)

    def end_epoch(self, *, train_loss: float, train_accuracy: float, val_loss: float | None = None, val_accuracy: float | None = None) -> dict:
        """Close the epoch: one row with the losses given (validation optional) and the telemetry measured. Returns
        the row."""
        t0 = time.perf_counter()
        m = self._m
        epoch = len(self.rows) + 1
        snr = snr_med = None
        if m.count >= 2:
            num = den = 0.0
            ratios = []
            for a, b in zip(m.s1, m.s2):
                mean = a / m.count
                var = (b - m.count * mean * mean).clamp_min(0) / (m.count - 1)
                num += float((mean.double() ** 2).sum())
                den += float(var.double().sum())
                ratios.append(((mean * mean) / var.clamp_min(1e-30)).reshape(-1))
            snr = num / den if den > 0 else None
            r = torch.cat(ratios)
            snr_med = float(r.median()) if r.numel() else None
        with torch.no_grad():
            norms = [float(p.detach().double().norm()) for p in self.params]
            dist = math.sqrt(sum(float(((p.detach() - w).double() ** 2).sum()) for p, w in zip(self.params, self.w0)))
            step = math.sqrt(sum(float(((p.detach() - w).double() ** 2).sum()) for p, w in zip(self.params, self.w_prev)))
            prev = math.sqrt(sum(float((w.double() ** 2).sum()) for w in self.w_prev))
            self.w_prev = [p.detach().clone() for p in self.params]
        wn = math.sqrt(sum(n * n for n in norms))
        layer = [n / n0 for n, n0, p in zip(norms, self.layer_w0, self.params) if p.dim() >= 2 and n0 > 0]
        dead, sat = self._saturation() if self.snapshot_epoch in (None, epoch) else (None, None)
        finite = lambda v: v is not None and math.isfinite(v)  # noqa: E731
        loss_end, loss_trend = quarter_trend(m.losses) if len(m.losses) == m.count else (None, None)
        _, grad_norm_trend = quarter_trend(m.norms)
        row = {
            "epoch": epoch,
            "train_loss": float(train_loss) if math.isfinite(float(train_loss)) else None,
            "train_accuracy": float(train_accuracy),
            "log10_grad_snr": math.log10(snr) if finite(snr) and snr > 0 else None,
            "log10_grad_snr_median": math.log10(snr_med) if finite(snr_med) and snr_med > 0 else None,
            "grad_norm": float(np.mean(m.norms)) if m.norms and all(map(math.isfinite, m.norms)) else None,
            "weight_norm_ratio": wn / self.w0_norm if math.isfinite(wn) and self.w0_norm > 0 else None,
            "weight_distance": dist / self.w0_norm if math.isfinite(dist) and self.w0_norm > 0 else None,
            "layer_norm_ratio_max": max(layer) if layer and all(map(math.isfinite, layer)) else None,
            "layer_norm_ratio_mean": float(np.mean(layer)) if layer and all(map(math.isfinite, layer)) else None,
            "update_ratio": step / prev if math.isfinite(step) and math.isfinite(prev) and prev > 0 else None,
            "loss_end": loss_end,
            "loss_trend": loss_trend,
            "grad_norm_trend": grad_norm_trend,
            "val_loss": float(val_loss) if finite(val_loss) else None,
            "val_accuracy": float(val_accuracy) if finite(val_accuracy) else None,
            "dead_relu_frac": dead,
            "saturated_frac": sat,
            **self._optimizer_fields(m),
            "minibatches": m.count,
        }
        self.rows.append(row)
        self._m = self._fresh()
        self.seconds += time.perf_counter() - t0
        return row

    def _optimizer_fields(self, m: _Moments) -> dict:
        """``lr``, ``momentum`` and ``adaptive`` of the epoch (module docstring); None without an optimizer."""
        if self.optimizer is None or not self.optimizer.param_groups:
            return {"lr": None, "momentum": None, "adaptive": None}
        lr = float(np.mean(m.lrs)) if m.lrs else _number(self.optimizer.param_groups[0].get("lr"))
        return {"lr": lr if lr is not None and math.isfinite(lr) and lr > 0 else None, **optimizer_settings(self.optimizer)}

    def table(self):
        """The epochs so far as a polars frame validated by :class:`prenet.data.schemas.Telemetry`."""
        import polars as pl

        from prenet.data.io import validate
        from prenet.data.schemas import Telemetry

        df = pl.DataFrame(self.rows, schema=telemetry_schema())
        return validate(df, Telemetry, source="Recorder.table()")


#: Optimizers that scale each step by their gradients' second moment (``adaptive`` 1); SGD is 0, any other unknown.
ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "RMSprop", "Adagrad", "Adadelta")


def _number(v) -> float | None:
    """``v`` as a float (a tensor lr too); None for what is not a number (``None``, a string)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def optimizer_settings(optimizer: torch.optim.Optimizer) -> dict:
    """``momentum`` (SGD's and RMSprop's heavy-ball momentum, Adam's β₁; None where it has neither or it is outside
    [0, 1)) and ``adaptive`` (1, 0 or None: :data:`ADAPTIVE`) of ``optimizer``'s first parameter group."""
    g = optimizer.param_groups[0]
    m = _number(g["momentum"]) if "momentum" in g else _number(g["betas"][0]) if "betas" in g else 0.0
    kind = type(optimizer).__name__
    adaptive = 0.0 if type(optimizer) is torch.optim.SGD else 1.0 if kind in ADAPTIVE else None
    return {"momentum": m if m is not None and 0 <= m < 1 else None, "adaptive": adaptive}


def quarter_trend(values: list[float]) -> tuple[float | None, float | None]:
    """(mean of the last quarter, ln(last quarter's mean / first quarter's)) of an epoch's per-minibatch values (≥ 4,
    all finite and ≥ 0; the quarters are len // 4 values each); (None, None) otherwise, and the ratio None when either
    quarter's mean is 0."""
    if len(values) < 4 or not all(math.isfinite(v) and v >= 0 for v in values):
        return None, None
    q = len(values) // 4
    first, last = float(np.mean(values[:q])), float(np.mean(values[-q:]))
    return last, math.log(last / first) if first > 0 and last > 0 else None


TELEMETRY_FLOAT = (
    "train_loss",
    "train_accuracy",
    "log10_grad_snr",
    "log10_grad_snr_median",
    "grad_norm",
    "weight_norm_ratio",
    "weight_distance",
    "layer_norm_ratio_max",
    "layer_norm_ratio_mean",
    "update_ratio",
    "loss_end",
    "loss_trend",
    "grad_norm_trend",
    "val_loss",
    "val_accuracy",
    "dead_relu_frac",
    "saturated_frac",
    "lr",
    "momentum",
    "adaptive",
)


def telemetry_schema() -> dict:
    """polars dtypes of the telemetry table (polars imported here, so recording needs only torch)."""
    import polars as pl

    return {"epoch": pl.Int64, **{c: pl.Float64 for c in TELEMETRY_FLOAT}, "minibatches": pl.Int64}
