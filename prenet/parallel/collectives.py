"""Time of a collective (all-reduce, all-gather, reduce-scatter) by algorithm: latency plus size over bandwidth.

Inside a node NCCL runs a ring over the ``n`` GPUs; the bytes each GPU puts on its link are

    all-reduce:                2 (n − 1) ring steps, 2 (n − 1) / n · S bytes
    all-gather, reduce-scatter:  (n − 1) ring steps,   (n − 1) / n · S bytes

(S: the full tensor, i.e. the all-gather's output and the reduce-scatter's input). With B the link's spec bandwidth per
GPU and direction (:mod:`prenet.parallel.interconnect`) and w = bytes / (η · B) the time at the achieved bandwidth,

    t = α₀ + α₁ · steps + w + h · √w

α₀: a launch and synchronisation latency; α₁: per ring step; η: the achieved share of B (one for all-reduce, which
also reduces, one for all-gather / reduce-scatter); h: the ramp between the latency and bandwidth regimes (NCCL's
pipelined protocols reach full bandwidth only on large messages). Across ``m`` nodes the collective is hierarchical,
as NCCL's tree/ring does it: a reduce-scatter inside each node, the all-reduce of each GPU's 1/n shard between nodes
(the node's network carries 2 (m − 1) / m · S), and an all-gather inside each node.

The constants are learned per link (``nvlink``, ``pcie``) from measured collectives (:func:`fit`, relative error):
XLA's all-reduce/all-gather/reduce-scatter tables on NVLink systems and DeepBench's NCCL all-reduces on PCIe GPUs.
η is bounded to [:data:`EFF_MIN`, :data:`EFF_MAX`]. PCIe without peer-to-peer uses PCIe's fit at half the bandwidth;
the network between nodes has no measurement with a known bandwidth here and keeps :data:`PRIOR` (answers say so).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.parallel.interconnect import Interconnect

OPS = ("all_reduce", "all_gather", "reduce_scatter")
#: Bounds of a link's achieved share of its spec bandwidth (NVLink SHARP on NVSwitch can beat the ring's formula).
EFF_MIN, EFF_MAX = 0.05, 1.5


@dataclass(frozen=True)
class LinkFit:
    """One link's learned constants (module docstring): ``latency_us`` α₀ (µs), ``step_us`` α₁ (µs per ring step),
    ``eff_reduce`` η of all-reduce, ``eff_gather`` η of all-gather / reduce-scatter, ``ramp`` h (√µs); ``rows``: the
    measurements fitted (0: a prior)."""

    latency_us: float
    step_us: float
    eff_reduce: float
    eff_gather: float
    ramp: float = 0.0
    rows: int = 0

    def time_us(self, op: str, steps: float, spec_us: float) -> float:
        """The time (µs) of ``op`` of ``steps`` ring steps whose bytes take ``spec_us`` at the spec bandwidth."""
        w = spec_us / (self.eff_reduce if op == "all_reduce" else self.eff_gather)
        return self.latency_us + self.step_us * steps + w + self.ramp * float(np.sqrt(w))


#: Before any fit, and for links without measurements: NCCL's documented order of magnitude (tens of µs to launch and
#: synchronise, a few µs per step) and 70-80 % of spec bandwidth.
PRIOR: dict[str, LinkFit] = {
    "nvlink": LinkFit(20.0, 1.0, 0.7, 0.7),
    "pcie": LinkFit(20.0, 5.0, 0.6, 0.6),
    "network": LinkFit(20.0, 10.0, 0.8, 0.8),
}


def ring_terms(op: str, n: int) -> tuple[int, float]:
    """(ring steps, bytes on each GPU's link per byte of the full tensor) of ``op`` over ``n`` GPUs."""
    if op not in OPS:
        raise PrenetError(f"unknown collective {op!r}; choose one of {', '.join(OPS)}")
    if n <= 1:
        return 0, 0.0
    if op == "all_reduce":
        return 2 * (n - 1), 2.0 * (n - 1) / n
    return n - 1, (n - 1) / n


@dataclass(frozen=True)
class CollectiveModel:
    """Learned constants per link (:class:`LinkFit`), and where they came from."""

    links: dict[str, LinkFit]
    source: str = "prior"

    def link(self, name: str) -> LinkFit:
        """The fit of ``name``; ``pcie_host`` (PCIe without P2P) is PCIe's (its bandwidth is halved in the spec)."""
        key = "pcie" if name == "pcie_host" else name
        return self.links.get(key, PRIOR[key])

    def fitted(self, name: str) -> bool:
        """Whether ``name``'s constants were learned from measurements (else :data:`PRIOR`'s)."""
        return self.link(name).rows > 0

    def ring_ms(self, op: str, size_bytes: float, n: int, link: str, gbps: float) -> float:
        """One ring ``op`` of a ``size_bytes`` tensor over ``n`` GPUs joined by ``link`` of spec ``gbps`` (ms)."""
        steps, per_byte = ring_terms(op, n)
        if steps == 0:
            return 0.0
        return self.link(link).time_us(op, steps, per_byte * size_bytes / (gbps * 1e3)) / 1e3

    def time_ms(self, op: str, size_bytes: float, ic: Interconnect, gpus_per_node: int, nodes: int = 1, network_gbits: float | None = None) -> float:
        """``op`` of a ``size_bytes`` tensor over ``gpus_per_node`` × ``nodes`` GPUs (ms): a ring inside one node,
        hierarchical across nodes (module docstring); ``network_gbits``: the node's network in Gb/s."""
        if nodes <= 1:
            return self.ring_ms(op, size_bytes, gpus_per_node, ic.link, ic.intra_gbps)
        if network_gbits is None:
            raise PrenetError("a job across nodes needs the network's bandwidth (--network, Gb/s per node)")
        inner = 0.0
        if gpus_per_node > 1:  # reduce-scatter (and all-gather) inside the node around the inter-node phase
            inner_ops = {"all_reduce": ("reduce_scatter", "all_gather"), "all_gather": ("all_gather",), "reduce_scatter": ("reduce_scatter",)}[op]
            inner = sum(self.ring_ms(o, size_bytes, gpus_per_node, ic.link, ic.intra_gbps) for o in inner_ops)
        return inner + self.ring_ms(op, size_bytes, nodes, "network", network_gbits / 8.0)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"source": self.source, "links": {k: asdict(v) for k, v in self.links.items()}}, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CollectiveModel:
        """The fitted model at ``path``; :data:`PRIOR` (``source`` says so) when there is none."""
        p = Path(path)
        if not p.is_file():
            return cls(dict(PRIOR), source=f"prior (no fitted collectives model at {p})")
        d = json.loads(p.read_text())
        return cls({k: LinkFit(**v) for k, v in d["links"].items()}, source=d.get("source", str(p)))


def _terms(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ring steps, µs at the spec bandwidth, is all-reduce) of measured rows."""
    steps, per_byte = zip(*(ring_terms(o, int(n)) for o, n in frame.select("op", "n").iter_rows()), strict=True)
    spec_us = np.asarray(per_byte) * frame["size_bytes"].to_numpy() / (frame["link_gbps"].to_numpy() * 1e3)
    return np.asarray(steps, dtype=float), spec_us, (frame["op"] == "all_reduce").to_numpy()


def fit_link(frame: pl.DataFrame) -> LinkFit:
    """The constants of one link from measured rows (columns ``op``, ``n``, ``size_bytes``, ``measured_us``,
    ``link_gbps``): least squares on log time (relative error), α ≥ 0, η in [EFF_MIN, EFF_MAX], h ≥ 0."""
    from scipy.optimize import least_squares

    steps, spec_us, reduce = _terms(frame)
    t = frame["measured_us"].to_numpy()

    def model(p: np.ndarray) -> np.ndarray:
        w = spec_us / np.where(reduce, p[2], p[3])
        return p[0] + p[1] * steps + w + p[4] * np.sqrt(w)

    lo, hi = [0.0, 0.0, EFF_MIN, EFF_MIN, 0.0], [1e3, 1e2, EFF_MAX, EFF_MAX, 1e2]
    r = least_squares(lambda p: np.log(model(p)) - np.log(t), x0=[10.0, 1.0, 0.7, 0.7, 1.0], bounds=(lo, hi))
    if not reduce.any():  # no all-reduce measured: it shares the gather's η
        r.x[2] = r.x[3]
    if reduce.all():
        r.x[3] = r.x[2]
    return LinkFit(*(float(v) for v in r.x), rows=frame.height)


def fit(frame: pl.DataFrame, source: str) -> CollectiveModel:
    """:func:`fit_link` for every link of ``frame`` (column ``link``; ``pcie_host`` rows fit PCIe's constants); links
    without rows keep :data:`PRIOR`."""
    links = dict(PRIOR)
    # PCIe with and without peer-to-peer is one link at its own spec bandwidth (``link_gbps`` halves the latter)
    by_link = frame.with_columns(pl.col("link").replace("pcie_host", "pcie"))
    for (name,), part in by_link.group_by(["link"]):
        links[str(name)] = fit_link(part)
    return CollectiveModel(links, source=source)


def predict_rows(model: CollectiveModel, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (measured collectives, one node or NVLink domain each) with ``predicted_us`` from ``model``."""
    pred = [
        1e3 * model.ring_ms(o, s, int(n), link, gbps)
        for o, s, n, link, gbps in frame.select("op", "size_bytes", "n", "link", "link_gbps").iter_rows()
    ]
    return frame.with_columns(pl.Series("predicted_us", pred, dtype=pl.Float64))
