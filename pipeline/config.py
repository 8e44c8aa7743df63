"""Loading the stage configuration: ``params.yaml`` (what DVC tracks) or a Hydra composition of ``conf/``."""

from __future__ import annotations

import difflib
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from prenet.errors import PrenetError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"


def compose(overrides: list[str] | None = None, conf_dir: str | Path = CONF_DIR) -> DictConfig:
    """Compose ``conf_dir``/config.yaml (the project's ``conf/``) with Hydra overrides (the same composition
    ``dvc exp run -S`` performs). An override Hydra cannot apply (an unknown group option or key, bad syntax) is one
    :class:`PrenetError` line naming it and where the choices are."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if not (Path(conf_dir) / "config.yaml").is_file():  # e.g. `prenet retrain --repo` naming another folder
        raise PrenetError(f"{conf_dir} holds no config.yaml: not a prenet checkout's conf/ (give --repo the checkout's root)")

    def composed(ov: list[str]) -> DictConfig:
        if GlobalHydra.instance().is_initialized() and Path(conf_dir) == CONF_DIR:  # inside a Hydra app: same conf/
            return hydra_compose(config_name="config", overrides=ov)
        with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base=None):
            return hydra_compose(config_name="config", overrides=ov)

    try:
        cfg = composed(list(overrides or []))
        values = value_overrides(overrides or [], conf_dir)
        if values:  # a value of the wrong kind (n_estimators=abc) never reaches params.yaml or a stage
            check_value_types(cfg, composed([o for o in overrides or [] if o not in values]), values, conf_dir)
        return cfg
    except (HydraException, OmegaConfBaseException) as e:
        first = " ".join(str(e).split()).split(" Config search path:")[0]
        if m := re.match(r"Could not override '([^']+)'\. To append to your config use \+", first):
            # Hydra's hint adds the misspelt key as a new one, which no stage reads: name the key meant instead
            keys = _dotted_keys(OmegaConf.to_container(composed([]), resolve=False))
            close = difflib.get_close_matches(m.group(1), keys, n=1, cutoff=0.6)
            first = (
                f"{m.group(1)!r} is not a key of the configuration"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + "; `--cfg job` lists the keys"
            )
        raise PrenetError(f"overrides {' '.join(overrides or [])!r}: {first} (the groups and their options are the files under {conf_dir})") from e


def _dotted_keys(tree: Any, prefix: str = "") -> list[str]:
    """Every key of a nested config as a dotted path (``predictor.n_estimators``)."""
    if not isinstance(tree, dict):
        return []
    out = []
    for k, v in tree.items():
        out.append(f"{prefix}{k}")
        out += _dotted_keys(v, f"{prefix}{k}.")
    return out


def value_overrides(overrides: list[str], conf_dir: str | Path = CONF_DIR) -> list[str]:
    """The overrides that set a value (``seed=3``, ``predictor.n_estimators=300``), not a group's option (``predictor=mlp``:
    its key names a folder of ``conf_dir``)."""
    return [o for o in overrides if "=" in o and not (Path(conf_dir) / o.split("=", 1)[0].lstrip("+~")).is_dir()]


def check_value_types(cfg: DictConfig, defaults: DictConfig, values: list[str], conf_dir: str | Path = CONF_DIR) -> None:
    """One :class:`PrenetError` line for the first ``key=value`` override whose value is text where the configuration
    (``defaults``: composed with the same group choices) holds a number or a true/false."""
    for item in values:
        key = item.split("=", 1)[0].lstrip("+~")
        was = OmegaConf.select(defaults, key, default=None)
        now = OmegaConf.select(cfg, key, default=None)
        if isinstance(was, (bool, int, float)) and isinstance(now, str):
            kind = "true or false" if isinstance(was, bool) else "a number"
            raise PrenetError(f"override {item!r}: {key} takes {kind} (its value in {conf_dir} is {was!r})")


def rooted(cfg: DictConfig) -> DictConfig:
    """``cfg`` with every relative ``paths.*`` made absolute under the project root, so a command run from any
    directory reads and writes the project's artifacts (stages run by DVC keep the relative paths of params.yaml)."""
    paths = {k: (v if Path(str(v)).is_absolute() else str(REPO_ROOT / str(v))) for k, v in cfg.paths.items()}
    return OmegaConf.merge(cfg, {"paths": paths})  # type: ignore[return-value]


def artifact_path(key: str, params: str | Path = REPO_ROOT / "params.yaml") -> Path:
    """Where artifact ``key`` of the configuration DVC last reproduced lives (``params.yaml``'s ``paths``; before any
    run, the ``paths`` group's defaults), absolute: the CLI's default locations, so they follow ``dvc exp run -S paths.…``.
    ``PRENET_ARTIFACTS`` (:func:`prenet.paths.artifact_root`) overrides both with another root."""
    from prenet.paths import artifact_root, default_path, resolve_paths

    paths = None if artifact_root() else _params_paths(str(params))
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


def write_params(cfg: DictConfig, path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Path:
    """Write a composed configuration as ``params.yaml`` (generated: never edit by hand); ``overrides``: those it was
    composed with, named in its header (none: the header of ``make params``)."""
    p = Path(path)
    header = "# GENERATED from conf/ by `make params` (Hydra compose); do not edit. Change conf/ or use `dvc exp run -S`.\n"
    if overrides:
        header += f"# composed with the overrides: {' '.join(overrides)} (`make params` restores the defaults)\n"
    p.write_text(header + OmegaConf.to_yaml(cfg, resolve=True))
    return p


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Run a stage; print a prenet error's message (one line, no traceback) and exit 2 on failure."""
    try:
        return fn()
    except (PrenetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


#: Hydra's command-line flags that take a value (the next argument), beside the overrides.
HYDRA_VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--info", "-i")


def is_override(arg: str) -> bool:
    """Whether a command-line argument is a Hydra override (``key=value``, ``+key=value``, ``~key``), not a flag."""
    return not arg.startswith("-") and ("=" in arg or arg.startswith("~"))


def check_stage_args(args: list[str]) -> None:
    """:class:`PrenetError` (one line) for what Hydra would answer in a multi-line block: a bare key without a value,
    and a sweep (``--multirun``), which a DVC stage cannot record (one params.yaml a run)."""
    if "--multirun" in args or "-m" in args:
        raise PrenetError(
            "sweeps (--multirun) are not run by a stage: a DVC run records one set of params. Run each setting on its own "
            "(python -m pipeline.<stage> key=value), or as a DVC experiment each: dvc exp run -S 'predictor=linear'"
        )
    for prev, a in zip([None, *args], args):
        if a.startswith("-") or is_override(a) or prev in HYDRA_VALUE_FLAGS:
            continue
        raise PrenetError(f"{a!r} is not an override: give key=value (e.g. {a}=...; `--cfg job` shows the keys), +key=value or ~key")


def hydra_entry(stage: Callable[[DictConfig], Any]) -> Callable[[], None]:
    """A Hydra CLI ``main`` for ``stage`` (``python -m pipeline.<stage> group=option key=value``)."""
    import hydra

    @hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
    def _main(cfg: DictConfig) -> None:
        def run() -> Any:
            from hydra.core.hydra_config import HydraConfig

            task = list(HydraConfig.get().overrides.task)
            values = value_overrides(task)
            if values:  # a value of the wrong kind is one line, not a traceback from deep inside the stage
                check_value_types(cfg, compose([o for o in task if o not in values]), values)
            return stage(cfg)

        run_guarded(run)

    def entry() -> None:
        # Hydra composes before _main runs and reports an unknown group option or key in its own multi-line block (exit
        # 1); the same composition through compose() is one line and exit 2, as every other entry point answers
        # the overrides (key=value, +key=value, ~key); Hydra's own flags and their values (--cfg job, -cn name) pass
        run_guarded(lambda: check_stage_args(sys.argv[1:]))
        overrides = [a for a in sys.argv[1:] if is_override(a)]
        if overrides:
            run_guarded(lambda: compose(overrides))
        _main()

    entry.__doc__ = stage.__doc__
    return entry
