"""Write the README's "Results" section from the records of the last pipeline run (data/plots/*.json) (``make run`` calls this).

python scripts/write_results.py            # rewrite the block between the markers in README.md
python scripts/write_results.py --check    # exit 1 when README.md and data/plots disagree
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prenet.rendering.results import current_block, replace_block, results_markdown

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--metrics", default=str(ROOT / "data" / "plots"), help="the stages' full records (pipeline/record.py)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = ap.parse_args(argv)
    readme = Path(args.readme)
    text = readme.read_text()
    block = results_markdown(args.metrics)
    if args.check:
        if current_block(text) != block:
            print(f"{readme}: the Results section differs from {args.metrics}; run `python scripts/write_results.py`", file=sys.stderr)
            return 1
        print(f"{readme}: Results section matches {args.metrics}")
        return 0
    new = replace_block(text, block)
    if new != text:
        readme.write_text(new)
        print(f"{readme}: Results section rewritten from {args.metrics}")
    else:
        print(f"{readme}: Results section already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
