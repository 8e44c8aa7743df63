"""Loading the stage configuration: ``params.yaml`` (what DVC tracks) or a Hydra composition of ``conf/``."""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from prenet.errors import PrenetError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides (the same composition ``dvc exp run -S`` performs)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside a Hydra app (`python -m pipeline.<stage> ...`): same conf/
        return hydra_compose(config_name="config", overrides=list(overrides or []))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return hydra_compose(config_name="config", overrides=list(overrides or []))


def rooted(cfg: DictConfig) -> DictConfig:
    """``cfg`` with every relative ``paths.*`` made absolute under the project root, so a command run from any
    directory reads and writes the project's artifacts (stages run by DVC keep the relative paths of params.yaml)."""
    paths = {k: (v if Path(str(v)).is_absolute() else str(REPO_ROOT / str(v))) for k, v in cfg.paths.items()}
    return OmegaConf.merge(cfg, {"paths": paths})  # type: ignore[return-value]


def artifact_path(key: str, params: str | Path = REPO_ROOT / "params.yaml") -> Path:
    """Where artifact ``key`` of the configuration DVC last reproduced lives (``params.yaml``'s ``paths``; before any
    run, the ``paths`` group's defaults), absolute: the CLI's default locations, so they follow ``dvc exp run -S paths.…``."""
    from prenet.paths import default_path, resolve_paths

    paths = _params_paths(str(params))
    return default_path(key) if paths is None else resolve_paths(paths, key, str(params))


@lru_cache(maxsize=4)
def _params_paths(params: str) -> dict[str, str] | None:
    import yaml

    p = Path(params)
    # params.yaml is written resolved (write_params): plain YAML, read with libyaml's loader (OmegaConf's pure-Python
    # parse of its 16 kB took ~0.5 s of every CLI answer)
    paths = (yaml.load(p.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("paths") if p.is_file() else None
    return None if paths is None else {str(k): str(v) for k, v in paths.items()}


def load_params(path: str | Path = "params.yaml") -> DictConfig:
    """The configuration DVC reproduces from."""
    p = Path(path)
    if not p.exists():
        raise PrenetError(f"{p} does not exist; generate it with `make params` (composes conf/) or `dvc exp run`")
    return OmegaConf.load(p)  # type: ignore[return-value]


def write_params(cfg: DictConfig, path: str | Path = "params.yaml") -> Path:
    """Write a composed configuration as ``params.yaml`` (generated: never edit by hand)."""
    p = Path(path)
    header = "# GENERATED from conf/ by `make params` (Hydra compose); do not edit. Change conf/ or use `dvc exp run -S`.\n"
    p.write_text(header + OmegaConf.to_yaml(cfg, resolve=True))
    return p


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Run a stage; print a prenet error's message (one line, no traceback) and exit 2 on failure."""
    try:
        return fn()
    except (PrenetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def hydra_entry(stage: Callable[[DictConfig], Any]) -> Callable[[], None]:
    """A Hydra CLI ``main`` for ``stage`` (``python -m pipeline.<stage> group=option key=value``)."""
    import hydra

    @hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
    def _main(cfg: DictConfig) -> None:
        run_guarded(lambda: stage(cfg))

    _main.__doc__ = stage.__doc__
    return _main
