"""The trained multi-GPU model (``train_parallel``): the collective model and the data-parallel residual, stored as
one JSON file; no torch and no op tables here, so scoring it imports neither."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from prenet.parallel.collectives import CollectiveModel


def precision_class(precision: str) -> str:
    """``16bit`` (fp16/bf16 autocast) or ``32bit`` (fp32/tf32): the residual is learned per class."""
    return "16bit" if precision in ("fp16", "bf16") else "32bit"


def sync_growth(n: int) -> float:
    """How the residual grows with the GPUs a step waits for, relative to 8: the expected maximum of n independent
    delays grows as √(2 ln n), so √(ln n / ln 8); 0 for one GPU."""
    return math.sqrt(math.log(n) / math.log(8)) if n > 1 else 0.0


@dataclass(frozen=True)
class SyncResidual:
    """Share of the one-GPU step a data-parallel step loses at 8 GPUs beyond its collectives, per precision class
    (:func:`precision_class`), learned from measured 1 → 8 GPU steps (``rows``); scaled by :func:`sync_growth`."""

    share_at_8: dict[str, float]
    rows: int = 0

    def ms(self, step_ms: float, precision: str, gpus: int) -> float:
        return step_ms * self.share_at_8.get(precision_class(precision), 0.0) * sync_growth(gpus)


@dataclass(frozen=True)
class ParallelModel:
    """What a multi-GPU answer needs beyond the one-GPU op models: the collective model and the sync residual."""

    collectives: CollectiveModel
    residual: SyncResidual

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        d = {
            "collectives": {"source": self.collectives.source, "links": {k: asdict(v) for k, v in self.collectives.links.items()}},
            "residual": asdict(self.residual),
        }
        p.write_text(json.dumps(d, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ParallelModel:
        """The trained model at ``path``; without one, the collectives' priors and no residual (``source`` says so)."""
        from prenet.parallel.collectives import PRIOR, LinkFit

        p = Path(path)
        if not p.is_file():
            return cls(
                CollectiveModel(dict(PRIOR), source=f"prior (no trained parallel model at {p}: run `dvc repro train_parallel`)"), SyncResidual({})
            )
        d = json.loads(p.read_text())
        coll = CollectiveModel({k: LinkFit(**v) for k, v in d["collectives"]["links"].items()}, source=d["collectives"]["source"])
        return cls(coll, SyncResidual(**d["residual"]))
