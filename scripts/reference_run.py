"""A committed reference run of a heavier configuration: every stage of the pipeline, in order, on ``conf/`` with the
given Hydra overrides; the stages' records (``plots/*.json``, ``metrics/*.json``) go to ``data/reference/<name>/`` (git
tracked, small JSON) and everything else (tables, models, report) to a work folder outside git.

    python scripts/reference_run.py experiment=full              # → data/reference/full/  (~25 min on 2 cores)

The README's Results take the figures the default run leaves out from here, marked with the configuration and the
date (``prenet/rendering/results.py``). ``data/reference/<name>/run.json`` says what ran: overrides, commit, host,
threads, start and wall time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from pipeline.config import compose, run_guarded
    from pipeline.stages import STAGES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="+", help="Hydra overrides, e.g. experiment=full")
    ap.add_argument("--name", help="folder under data/reference (default: the experiment's name)")
    ap.add_argument("--from", dest="start", help="resume at this stage (the earlier stages' outputs are in the work folder)")
    ap.add_argument("--work", type=Path, default=ROOT / "data" / "reference_work", help="where tables and models go (default: %(default)s)")
    args = ap.parse_args()
    name = args.name or next((o.split("=", 1)[1] for o in args.overrides if o.startswith("experiment=")), None)
    if not name:
        print("error: give --name or an experiment=... override (the reference folder is named after it)", file=sys.stderr)
        return 2
    out = ROOT / "data" / "reference" / name
    work = args.work.resolve() / name
    paths = [f"paths.root={work}", f"paths.plots={out / 'plots'}", f"paths.metrics={out / 'metrics'}", f"paths.run_log={work / 'run_log.jsonl'}"]
    cfg = compose([*args.overrides, "progress=false", *paths])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    started, t0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.monotonic()
    stages = list(STAGES)[list(STAGES).index(args.start) :] if args.start else list(STAGES)
    for stage in stages:
        print(f"reference run {name}: {stage}", flush=True)
        run_guarded(lambda: getattr(importlib.import_module(f"pipeline.{stage}"), stage)(cfg))
    info = {
        "overrides": args.overrides,
        "commit": commit,
        "host": platform.processor() or platform.machine(),
        "threads": int(cfg.threads),
        "started": started,
        "wall_s": round(time.monotonic() - t0, 1),
        **({"resumed_from": args.start} if args.start else {}),
        "reproduce": f"python scripts/reference_run.py {' '.join(args.overrides)}",
    }
    (out / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"reference run {name}: {info['wall_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
