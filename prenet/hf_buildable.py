"""Which of transformers' model types prenet answers for, as last checked (``data/hf/buildable.json``, written by
``scripts/check_hf_models.py``: each type's default config built on ``meta`` and one training step traced). Read by
``prenet models hf`` so that it lists the types a user can ask about; no torch or transformers import here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prenet.paths import data_dir


def record_path() -> Path:
    """Where the check's record lives (under ``PRENET_DATA_DIR``'s ``hf/``)."""
    return data_dir() / "hf" / "buildable.json"


@dataclass(frozen=True)
class HfCheck:
    """One run of ``scripts/check_hf_models.py``: the transformers version it ran with, its date (YYYY-MM-DD), the
    types whose step traced (``notes``: a caveat for some, e.g. BF16 only), and every other type's one-line reason."""

    transformers: str
    checked: str
    answers: frozenset[str]
    notes: dict[str, str]
    fails: dict[str, str]

    def applies_to(self, version: str) -> bool:
        """Whether the check was made with transformers ``version`` (another version may add or change types)."""
        return self.transformers == version


def load_check(path: Path | None = None) -> HfCheck | None:
    """The last check's record; None where there is none."""
    p = path or record_path()
    if not p.exists():
        return None
    raw = json.loads(p.read_text())
    return HfCheck(str(raw["transformers"]), str(raw["checked"]), frozenset(raw["answers"]), dict(raw.get("notes", {})), dict(raw["fails"]))
