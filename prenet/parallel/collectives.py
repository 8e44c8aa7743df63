"""Time of a collective (all-reduce, all-gather, reduce-scatter) by algorithm: latency plus size over bandwidth.

Inside a node NCCL runs a ring over the ``n`` GPUs; the bytes each GPU puts on its link are

    all-reduce:                2 (n − 1) ring steps, 2 (n − 1) / n · S bytes
    all-gather, reduce-scatter:  (n − 1) ring steps,   (n − 1) / n · S bytes

(S: the full tensor, i.e. the all-gather's output and the reduce-scatter's input). With B the link's spec bandwidth per
GPU and direction (:mod:`prenet.parallel.interconnect`) and w = bytes / (η_n · B) the time at the achieved bandwidth,

    t_ring = α₀ + α₁ · steps + w + h · √w,        η_n = η · n / (n + k)

α₀: a launch and synchronisation latency; α₁: per ring step; η: the achieved share of B (one for all-reduce, which
also reduces, one for all-gather / reduce-scatter); k: the pipeline's fill and drain, in chunks of S / n, which costs
a small ring a larger share of its bandwidth; h: the ramp between the latency and bandwidth regimes (NCCL's pipelined
protocols reach full bandwidth only on large messages).

On NVSwitch systems with NVLink SHARP (NVLS: third-generation NVSwitch, H100 SXM on; ``nvls`` in the interconnect
table) NCCL may reduce inside the switch instead. Its all-reduce takes

    t_nvls = α₀ + α_s · log₂ n + w_s + h · √w_s,   w_s = S / (η_s · B)

(each GPU sends its S to the switch once and receives the reduced S once)

and NCCL's tuner runs whichever is faster, so t = min(t_ring, t_nvls): a flat latency on 16-72 GPUs, where a ring's
grows with every step, and the switch's bandwidth on large messages. Across ``m`` nodes the collective is hierarchical,
as NCCL's tree/ring does it: a reduce-scatter inside each node, the all-reduce of each GPU's 1/n shard between nodes
(the node's network carries 2 (m − 1) / m · S), and an all-gather inside each node.

The constants are learned per link (``nvlink``, ``pcie``) from measured collectives (:func:`fit`, relative error):
XLA's all-reduce/all-gather/reduce-scatter tables on NVLink systems (all with NVLS) and DeepBench's NCCL all-reduces
on PCIe GPUs. η is bounded to [:data:`EFF_MIN`, :data:`EFF_MAX`]. PCIe without peer-to-peer uses PCIe's fit at half
the bandwidth; the network between nodes has no measurement with a known bandwidth here and keeps :data:`PRIOR`
(answers say so).
"""

from __future__ import annotations

import json
from dataclasses import asdict, astuple, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from prenet.errors import PrenetError
from prenet.parallel.interconnect import Interconnect

OPS = ("all_reduce", "all_gather", "reduce_scatter")
#: Bounds of a link's achieved share of its spec bandwidth (NVLink SHARP on NVSwitch can beat the ring's formula).
EFF_MIN, EFF_MAX = 0.05, 1.5
#: Upper bound of the pipeline fill and drain ``k`` (chunks of S / n).
FILL_MAX = 16.0


@dataclass(frozen=True)
class LinkFit:
    """One link's learned constants (module docstring): ``latency_us`` α₀ (µs), ``step_us`` α₁ (µs per ring step),
    ``eff_reduce`` η of all-reduce, ``eff_gather`` η of all-gather / reduce-scatter, ``ramp`` h (√µs), ``fill`` k
    (chunks); ``nvls_step_us`` α_s (µs per doubling of the GPUs) and ``eff_nvls`` η_s of the in-switch all-reduce (0:
    not measured on this link); ``rows``: the measurements fitted (0: a prior)."""

    latency_us: float
    step_us: float
    eff_reduce: float
    eff_gather: float
    ramp: float = 0.0
    rows: int = 0
    fill: float = 0.0
    nvls_step_us: float = 0.0
    eff_nvls: float = 0.0

    def time_us(self, op: str, n: int, spec_us: float, nvls: bool = False) -> float:
        """The time (µs) of ``op`` over ``n`` GPUs whose bytes take ``spec_us`` at the spec bandwidth; ``nvls``: the
        switch can reduce (NCCL then runs the faster of the ring and NVLS)."""
        return float(self.times_us(np.array([op == "all_reduce"]), np.array([float(n)]), np.array([spec_us]), np.array([nvls]))[0])

    def times_us(self, reduce: np.ndarray, n: np.ndarray, spec_us: np.ndarray, nvls: np.ndarray) -> np.ndarray:
        """:meth:`time_us` of arrays (``reduce``: the op is an all-reduce; ``n`` ≥ 2)."""
        return _time_us(np.array(astuple(self)[:5] + (self.fill, self.nvls_step_us, self.eff_nvls)), reduce, n, spec_us, nvls)


def _time_us(p: np.ndarray, reduce: np.ndarray, n: np.ndarray, spec_us: np.ndarray, nvls: np.ndarray) -> np.ndarray:
    """The module docstring's time (µs) with constants ``p`` = (α₀, α₁, η_reduce, η_gather, h, k, α_s, η_s)."""
    steps = np.where(reduce, 2.0 * (n - 1.0), n - 1.0)
    w = spec_us / (np.where(reduce, p[2], p[3]) * n / (n + p[5]))
    t = p[0] + p[1] * steps + w + p[4] * np.sqrt(w)
    if p[7] > 0:  # NVLS: each GPU sends S to the switch and receives the reduced S (spec_us counts 2 (n − 1) / n · S)
        ws = spec_us * n / (2.0 * np.maximum(n - 1.0, 1.0)) / p[7]
        t_nvls = p[0] + p[6] * np.log2(n) + ws + p[4] * np.sqrt(ws)
        t = np.where(reduce & nvls, np.minimum(t, t_nvls), t)
    return t


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

    def ring_ms(self, op: str, size_bytes: float, n: int, link: str, gbps: float, nvls: bool = False) -> float:
        """One ``op`` of a ``size_bytes`` tensor over ``n`` GPUs joined by ``link`` of spec ``gbps`` (ms): a ring, or
        NVLS where the switch can reduce (``nvls``) and it is faster."""
        steps, per_byte = ring_terms(op, n)
        if steps == 0:
            return 0.0
        return self.link(link).time_us(op, n, per_byte * size_bytes / (gbps * 1e3), nvls) / 1e3

    def time_ms(self, op: str, size_bytes: float, ic: Interconnect, gpus_per_node: int, nodes: int = 1, network_gbits: float | None = None) -> float:
        """``op`` of a ``size_bytes`` tensor over ``gpus_per_node`` × ``nodes`` GPUs (ms): a ring inside one node,
        hierarchical across nodes (module docstring); ``network_gbits``: the node's network in Gb/s."""
        if nodes <= 1:
            return self.ring_ms(op, size_bytes, gpus_per_node, ic.link, ic.intra_gbps, ic.nvls)
        if network_gbits is None:
            raise PrenetError("a job across nodes needs the network's bandwidth (--network, Gb/s per node)")
        inner = 0.0
        if gpus_per_node > 1:  # reduce-scatter (and all-gather) inside the node around the inter-node phase
            inner_ops = {"all_reduce": ("reduce_scatter", "all_gather"), "all_gather": ("all_gather",), "reduce_scatter": ("reduce_scatter",)}[op]
            inner = sum(self.ring_ms(o, size_bytes, gpus_per_node, ic.link, ic.intra_gbps, ic.nvls) for o in inner_ops)
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


def _terms(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(is all-reduce, GPUs, µs at the spec bandwidth, the switch can reduce) of measured rows."""
    per_byte = [ring_terms(o, int(n))[1] for o, n in frame.select("op", "n").iter_rows()]
    spec_us = np.asarray(per_byte) * frame["size_bytes"].to_numpy() / (frame["link_gbps"].to_numpy() * 1e3)
    nvls = frame["nvls"].to_numpy() if "nvls" in frame.columns else np.zeros(frame.height, dtype=bool)
    return (frame["op"] == "all_reduce").to_numpy(), frame["n"].to_numpy().astype(float), spec_us, nvls.astype(bool)


def fit_link(frame: pl.DataFrame) -> LinkFit:
    """The constants of one link from measured rows (columns ``op``, ``n``, ``size_bytes``, ``measured_us``,
    ``link_gbps``, optionally ``nvls``): least squares on log time (relative error), α ≥ 0, η in [EFF_MIN, EFF_MAX],
    h ≥ 0, k in [0, FILL_MAX]. NVLS's constants are fitted only where an all-reduce could run it (``nvls`` rows); the
    fit starts from two points (ring-like and switch-like NVLS) and keeps the better."""
    from scipy.optimize import least_squares

    reduce, n, spec_us, nvls = _terms(frame)
    t = frame["measured_us"].to_numpy()
    with_nvls = bool((reduce & nvls).any())
    lo = [0.0, 0.0, EFF_MIN, EFF_MIN, 0.0, 0.0, 0.0, EFF_MIN if with_nvls else 0.0]
    hi = [1e3, 1e2, EFF_MAX, EFF_MAX, 1e2, FILL_MAX, 1e3, EFF_MAX if with_nvls else 1e-12]
    starts = ([10.0, 1.0, 0.7, 0.7, 1.0, 1.0, 5.0, 0.9], [20.0, 1.0, 0.8, 0.8, 3.0, 0.5, 20.0, 1.2])
    best = None
    for x0 in starts:
        x0 = np.clip(x0, lo, hi)
        r = least_squares(lambda p: np.log(_time_us(p, reduce, n, spec_us, nvls)) - np.log(t), x0=x0, bounds=(lo, hi))
        if best is None or r.cost < best.cost:
            best = r
    x = [float(v) for v in best.x]
    if not reduce.any():  # no all-reduce measured: it shares the gather's η
        x[2] = x[3]
    if reduce.all():
        x[3] = x[2]
    if not with_nvls:
        x[6] = x[7] = 0.0
    return LinkFit(*x[:5], rows=frame.height, fill=x[5], nvls_step_us=x[6], eff_nvls=x[7])


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
        1e3 * model.ring_ms(o, s, int(n), link, gbps, bool(nvls))
        for o, s, n, link, gbps, nvls in frame.select("op", "size_bytes", "n", "link", "link_gbps", "nvls").iter_rows()
    ]
    return frame.with_columns(pl.Series("predicted_us", pred, dtype=pl.Float64))
