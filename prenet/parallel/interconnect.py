"""How the GPUs of a job are joined: NVLink or PCIe inside a node, a network between nodes, from the spec sheet.

Bandwidths are GB/s (1e9 bytes/s) per GPU and per direction. The facts live in ``data/hardware/interconnect.csv``
(one row per catalog GPU, with its source); a device described by a spec YAML may carry the same keys
(``nvlink_gbps``, ``pcie_gen``, ``pcie_lanes``, ``p2p``, ``gpus_per_node``, ``nvls``). A GPU with neither is answered as a PCIe
3.0 x16 board with peer-to-peer, and says so (:attr:`Interconnect.assumed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

from prenet.errors import PrenetError
from prenet.hardware.spec import HardwareSpec
from prenet.paths import data_dir

#: PCIe bandwidth per lane and direction (GB/s) by generation, after line encoding (8b/10b for 1-2, 128b/130b after).
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

#: Inter-node bandwidth assumed when the job spans nodes and ``--network`` is not given (Gb/s per node).
DEFAULT_NETWORK_GBITS = 200.0


@dataclass(frozen=True)
class Interconnect:
    """The links of one GPU model. ``nvlink_gbps``: NVLink bandwidth per GPU and direction (None: no NVLink);
        ``pcie_gen``/``pcie_lanes``: the host link; ``p2p``: whether GPUs of a node reach each other's memory directly
        (without it every transfer is staged through host memory, crossing PCIe twice); ``gpus_per_node``: the most GPUs
        of this model one server holds; ``nvls``: its NVSwitch can reduce in the switch (NVLink SHARP, third-generation
    NVSwitch on: HGX H100 and later); ``assumed``: no spec was found and PCIe 3.0 x16 with peer-to-peer was assumed."""

    nvlink_gbps: float | None
    pcie_gen: int
    pcie_lanes: int
    p2p: bool
    gpus_per_node: int
    source: str
    assumed: bool = False
    nvls: bool = False

    @property
    def pcie_gbps(self) -> float:
        """PCIe bandwidth per direction (GB/s)."""
        return PCIE_GBPS_PER_LANE[self.pcie_gen] * self.pcie_lanes

    @property
    def link(self) -> str:
        """The link a collective inside the node runs on: ``nvlink`` | ``pcie`` | ``pcie_host`` (PCIe without P2P)."""
        if self.nvlink_gbps:
            return "nvlink"
        return "pcie" if self.p2p else "pcie_host"

    @property
    def intra_gbps(self) -> float:
        """Spec bandwidth per GPU and direction of the link inside the node (GB/s); without P2P a transfer crosses
        PCIe twice (device → host → device), so half of it."""
        if self.nvlink_gbps:
            return float(self.nvlink_gbps)
        return self.pcie_gbps if self.p2p else self.pcie_gbps / 2.0

    def describe(self) -> str:
        """One line for answers: the link and its bandwidth."""
        if self.nvlink_gbps:
            return f"NVLink {self.nvlink_gbps:g} GB/s per GPU and direction" + (", NVSwitch with SHARP (NVLS)" if self.nvls else "")
        how = "peer-to-peer" if self.p2p else "no peer-to-peer: staged through host memory"
        return f"PCIe {self.pcie_gen}.0 x{self.pcie_lanes} ({self.pcie_gbps:.0f} GB/s per direction, {how})"


ASSUMED = Interconnect(nvlink_gbps=None, pcie_gen=3, pcie_lanes=16, p2p=True, gpus_per_node=8, source="assumed", assumed=True)


@lru_cache(maxsize=4)
def _table(root: str) -> dict[str, Interconnect]:
    out: dict[str, Interconnect] = {}
    for r in pl.read_csv(Path(root) / "hardware" / "interconnect.csv", infer_schema_length=0).iter_rows(named=True):
        out[r["gpu"]] = Interconnect(
            nvlink_gbps=float(r["nvlink_gbps"]) if r["nvlink_gbps"] else None,
            pcie_gen=int(r["pcie_gen"]),
            pcie_lanes=int(r["pcie_lanes"]),
            p2p=r["p2p"] == "yes",
            gpus_per_node=int(r["gpus_per_node"]),
            source=f"interconnect.csv: {r['source']}",
            nvls=r["nvls"] == "yes",
        )
    return out


def interconnect(hw: HardwareSpec) -> Interconnect:
    """The links of ``hw``: its row of ``interconnect.csv``, else the keys of its spec YAML (``hw.extra``), else
    :data:`ASSUMED` (PCIe 3.0 x16 with peer-to-peer; ``assumed`` is set so answers can say so)."""
    if hw.kind != "gpu":
        raise PrenetError(f"{hw.hardware_id} is a {hw.kind}: multi-device jobs are answered for GPUs only; drop --gpus/--nodes")
    row = _table(str(data_dir())).get(hw.hardware_id)
    if row is not None:
        return row
    x = hw.extra or {}
    if any(k in x for k in ("nvlink_gbps", "pcie_gen", "p2p", "gpus_per_node", "nvls")):
        return Interconnect(
            nvlink_gbps=float(x["nvlink_gbps"]) if x.get("nvlink_gbps") else None,
            pcie_gen=int(x.get("pcie_gen", 3)),
            pcie_lanes=int(x.get("pcie_lanes", 16)),
            p2p=bool(x.get("p2p", True)),
            gpus_per_node=int(x.get("gpus_per_node", 8)),
            source=f"spec file of {hw.hardware_id}",
            nvls=bool(x.get("nvls", False)),
        )
    return ASSUMED
