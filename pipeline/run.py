"""DVC's entry point: ``python -m pipeline.run <stage> [--params params.yaml]`` runs one stage on params.yaml."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

try:
    from pipeline.config import load_params, run_guarded
except ImportError as e:  # dvc started the stage with a Python that lacks the project's dependencies
    print(
        f"error: {sys.executable} cannot import {e.name or 'the project'}: prenet's stages need the project's venv; "
        "run `make install`, then `source .venv/bin/activate` (or `make run`) and rerun dvc",
        file=sys.stderr,
    )
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pipeline.run", description=__doc__)
    ap.add_argument("stage", help="a stage of dvc.yaml (pipeline/stages.py lists them)")
    ap.add_argument("--params", default="params.yaml", help="configuration file (default: params.yaml)")
    args = ap.parse_args(argv)
    fn = getattr(importlib.import_module(f"pipeline.{args.stage}"), args.stage, None) if importlib.util.find_spec(f"pipeline.{args.stage}") else None
    if fn is None:
        print(f"error: {args.stage!r} is not a stage (pipeline/<stage>.py defining {args.stage}()); pipeline/stages.py lists them", file=sys.stderr)
        sys.exit(2)
    run_guarded(lambda: fn(load_params(args.params)))


if __name__ == "__main__":
    main()
