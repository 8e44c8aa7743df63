"""Regenerate ``params.yaml`` from ``conf/``: ``python -m pipeline.compose [override ...]``.

This is the composition ``dvc exp run -S`` performs; ``make params`` calls it with no overrides."""

from __future__ import annotations

import sys

from pipeline.config import compose, write_params
from prenet.errors import PrenetError


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return
    try:
        print(f"wrote {write_params(compose(args), overrides=args)}")
    except PrenetError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
