"""Where the project's shipped data lives (vendored spec tables and external timings) and where its artifacts are
(:func:`artifact`)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

#: Repository root when prenet is installed in editable mode (the supported install).
REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """The folder holding ``hardware/`` and ``external/``; override with ``PRENET_DATA_DIR``."""
    return Path(os.environ.get("PRENET_DATA_DIR", REPO_ROOT / "data"))


@lru_cache(maxsize=1)
def _artifact_paths() -> dict[str, str]:
    """The ``paths`` of the configuration DVC last reproduced (``params.yaml``), else of ``conf/paths/default.yaml``."""
    from omegaconf import OmegaConf

    params = REPO_ROOT / "params.yaml"
    if params.is_file():
        paths = OmegaConf.load(params).get("paths")
        if paths is not None:
            return {str(k): str(v) for k, v in OmegaConf.to_container(paths, resolve=True).items()}  # type: ignore[union-attr]
    conf = OmegaConf.create({"paths": OmegaConf.load(REPO_ROOT / "conf" / "paths" / "default.yaml")})
    return {str(k): str(v) for k, v in OmegaConf.to_container(conf.paths, resolve=True).items()}  # type: ignore[union-attr]


def artifact(key: str) -> Path:
    """Where artifact ``key`` of the ``paths`` config group lives (``models_ops``, ``outcome_models``, ``intervals``…),
    absolute: relative paths resolve against the project root, so defaults hold from any directory. The one source of
    the library's and the CLI's default locations (``conf/paths/default.yaml``, as composed into ``params.yaml``)."""
    paths = _artifact_paths()
    if key not in paths:
        raise KeyError(f"{key!r} is not a key of conf/paths/default.yaml ({', '.join(sorted(paths))})")
    p = Path(paths[key])
    return p if p.is_absolute() else REPO_ROOT / p
