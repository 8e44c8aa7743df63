"""How fast the CLI answers: the median wall time (s) of N whole-process runs of each command a user types, and what
``import prenet.api`` pulls in. Run after ``make run`` (the commands read its models):

    python scripts/cli_speed.py [--repeats 5] [--out data/reference/cli_speed.json]

Targets (issue 27): ``predict step-time`` of a ResNet-50-sized model on one GPU ≤ 3 s, ``plan`` over the whole catalog
≤ 5 s, and ``import prenet.api`` without xgboost or scikit-learn. ``import torch`` alone is timed too: it is the floor under every
cold answer, and it moves with the host's speed (1.2-3.3 s on the 2-core hosts measured so far). Timings on a shared 2-core host are noisy: the
median of the runs and their min/max are reported, with the thread count.

Each command is timed twice: ``cold`` traces the step (``PRENET_TRACE_CACHE=off``: torch imported, the model built
and traced on meta), ``stored`` answers a repeated question about the same job from its stored trace
(:mod:`prenet.steptime.job_trace`, in a fresh store warmed by one untimed run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ENTRY = Path(sys.executable).parent / "prenet"  # the console script users type
PRENET = [str(_ENTRY)] if _ENTRY.is_file() else [sys.executable, "-m", "pipeline.cli"]
COMMANDS = {
    "import torch": [sys.executable, "-c", "import torch"],  # the host's speed: the floor under every cold answer
    "import prenet.api": [sys.executable, "-c", "import prenet.api"],
    "predict step-time resnet50 b32 H100": [
        *PRENET,
        "predict",
        "step-time",
        "--model",
        "resnet50",
        "--batch-size",
        "32",
        "--hardware",
        "H100 SXM5 80GB",
    ],
    "plan resnet50 b32 (whole catalog)": [*PRENET, "plan", "--model", "resnet50", "--batch-size", "32", "--steps", "10000"],
}
HEAVY = ("torch", "xgboost", "sklearn", "scipy", "prefect", "hydra", "pandera", "matplotlib")


def time_command(cmd: list[str], repeats: int, env: dict[str, str] | None = None) -> dict:
    """Wall seconds of ``repeats`` runs of ``cmd`` (each must exit 0) in ``env`` (default: this process's)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"error: {' '.join(cmd[2:])} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    return {"median_s": round(statistics.median(times), 2), "min_s": round(min(times), 2), "max_s": round(max(times), 2), "runs": repeats}


def heavy_imports() -> list[str]:
    """The heavy top-level packages ``import prenet.api`` loads."""
    code = "import sys, prenet.api; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    mods = set(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    return sorted(m for m in HEAVY if m in mods)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    res = {
        "measured_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "host": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": int(os.environ.get("OMP_NUM_THREADS", "1")),
        "commands": {},
        "prenet_api_heavy_imports": heavy_imports(),
    }
    with tempfile.TemporaryDirectory(prefix="prenet-cli-speed-") as store:
        envs = {"cold": {**os.environ, "PRENET_TRACE_CACHE": "off"}, "stored": {**os.environ, "PRENET_TRACE_CACHE": "on", "PRENET_CACHE_DIR": store}}
        for name, cmd in COMMANDS.items():
            for mode, env in envs.items():
                if name.startswith("import ") and mode == "stored":
                    continue
                if mode == "stored":
                    time_command(cmd, 1, env)  # stores the job's trace
                res["commands"][f"{name} [{mode}]"] = time_command(cmd, args.repeats, env)
    for name, r in res["commands"].items():
        print(f"{name:50} median {r['median_s']:6.2f} s  (min {r['min_s']:.2f}, max {r['max_s']:.2f}, {r['runs']} runs)")
    print(f"import prenet.api loads: {', '.join(res['prenet_api_heavy_imports']) or 'none of ' + ', '.join(HEAVY)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
