"""Where the project's shipped data lives (vendored spec tables and external timings)."""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root when prenet is installed in editable mode (the supported install).
REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """The folder holding ``hardware/`` and ``external/``; override with ``PRENET_DATA_DIR``."""
    return Path(os.environ.get("PRENET_DATA_DIR", REPO_ROOT / "data"))
