"""Where the project's shipped data lives (vendored spec tables and external timings) and the library's default
artifact locations (:func:`default_path`). The library never reads ``params.yaml``: callers pass paths, and a
default is the ``paths`` group's own file, ``conf/paths/default.yaml`` (the CLI resolves its defaults from the
composed configuration instead: ``pipeline.config.artifact_path``)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

#: Repository root when prenet is installed in editable mode (the supported install).
REPO_ROOT = Path(__file__).resolve().parents[1]
PATHS_GROUP = REPO_ROOT / "conf" / "paths" / "default.yaml"


def data_dir() -> Path:
    """The folder holding ``hardware/`` and ``external/``; override with ``PRENET_DATA_DIR``."""
    return Path(os.environ.get("PRENET_DATA_DIR", REPO_ROOT / "data"))


def user_store(kind: str) -> Path | None:
    """The folder of this user's stored answers of one ``kind`` (``traces``, ``hardware``): under ``PRENET_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/prenet``, else ``~/.cache/prenet``; None when ``PRENET_TRACE_CACHE`` is ``off`` (or ``0``,
    ``false``, ``no``: the store's one switch) or no home directory is to be found."""
    if os.environ.get("PRENET_TRACE_CACHE", "on").strip().lower() in ("off", "0", "false", "no"):
        return None
    try:
        root = os.environ.get("PRENET_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prenet"
    except RuntimeError:  # no home directory to be found: no store
        return None
    return Path(root) / kind


#: Environment variable naming another artifact root (``paths.root``) for the library's and the CLI's defaults: the
#: trained models of a run made elsewhere (``make run`` with ``paths.root=…``, or a copy of its ``data/``). The tests set
#: it to an empty folder, so no test reads the checkout's own artifacts, which a clean checkout (CI) lacks.
ARTIFACTS_ENV = "PRENET_ARTIFACTS"


def artifact_root() -> str | None:
    """The artifact root ``PRENET_ARTIFACTS`` names, absolute; None when unset."""
    root = os.environ.get(ARTIFACTS_ENV)
    return str(Path(root).resolve()) if root else None


@lru_cache(maxsize=2)
def _group_paths(root: str | None = None) -> dict[str, str]:
    """Every key of ``conf/paths/default.yaml``, interpolated (``root``: another ``paths.root``)."""
    from omegaconf import OmegaConf

    conf = OmegaConf.create({"paths": OmegaConf.load(PATHS_GROUP)})
    if root is not None:
        conf.paths.root = root
    return {str(k): str(v) for k, v in OmegaConf.to_container(conf.paths, resolve=True).items()}  # type: ignore[union-attr]


def resolve_paths(paths: dict[str, str], key: str, where: str) -> Path:
    """``paths[key]`` made absolute against the project root (one rule for the library's and the CLI's defaults)."""
    if key not in paths:
        raise KeyError(f"{key!r} is not a key of {where} ({', '.join(sorted(paths))})")
    p = Path(paths[key])
    return p if p.is_absolute() else REPO_ROOT / p


def default_path(key: str, given: str | Path | None = None) -> Path:
    """``given`` when a caller gave a path; else the default location of artifact ``key`` of the ``paths`` group
    (``models_ops``, ``outcome_models``…), absolute, under ``PRENET_ARTIFACTS`` when it is set, read when called (so an
    API default set after import follows the variable)."""
    if given is not None:
        return Path(given)
    return resolve_paths(_group_paths(artifact_root()), key, "conf/paths/default.yaml")
