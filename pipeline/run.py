"""DVC's entry point: ``python -m pipeline.run <stage> [--params params.yaml]`` runs one stage on params.yaml."""

from __future__ import annotations

import argparse
import importlib
import sys

from pipeline import STAGES

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
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--params", default="params.yaml", help="configuration file (default: params.yaml)")
    args = ap.parse_args(argv)
    fn = getattr(importlib.import_module(f"pipeline.{args.stage}"), args.stage)
    run_guarded(lambda: fn(load_params(args.params)))


if __name__ == "__main__":
    main()
