"""Generate the out-of-corpus early-success runs (issue 29):
``python scripts/generate_out_of_corpus.py [--runs 240] [--seed 7] [--prior user_loop|beyond]``.

A plain torch loop over scikit-learn's digits with the Recorder, settings from an out-of-corpus prior
(``prenet/outcome/out_of_corpus.py``: ``user_loop``, seed 7, into ``data/outcome/out_of_corpus``; ``beyond``, settings
outside every corpus recipe, seed 11, into ``data/outcome/beyond_corpus``). Writes ``{runs,telemetry}.parquet``,
``runs_repeated.parquet`` (every setting trained once more with another seed: the seed-to-seed yardstick,
``prenet.outcome.out_of_corpus.seed_ceiling``) and ``provenance.json``; the ``evaluate_outcome_ooc`` stage scores the
predictor on them. No part of the pipeline fits on these runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prenet.names import OOC_PRIORS  # noqa: E402  (the light names module: no torch before the thread count is set)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=240)
    ap.add_argument("--seed", type=int, default=None, help="default: 7 (user_loop), 11 (beyond): the shipped sets'")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--prior", default="user_loop", choices=list(OOC_PRIORS))
    ap.add_argument("--out", default=None, help="default: data/outcome/out_of_corpus (user_loop), data/outcome/beyond_corpus (beyond)")
    args = ap.parse_args(argv)
    args.seed = args.seed if args.seed is not None else 7 if args.prior == "user_loop" else 11
    args.out = args.out or str(ROOT / "data" / "outcome" / ("out_of_corpus" if args.prior == "user_loop" else "beyond_corpus"))
    import torch

    torch.set_num_threads(1)
    from prenet.outcome.out_of_corpus import RESEED, collect, late_bloomer_share, seed_ceiling

    t0 = time.monotonic()
    runs, tel = collect(args.runs, args.seed, args.epochs, prior=args.prior)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.write_parquet(out / "runs.parquet")
    tel.write_parquet(out / "telemetry.parquet")
    repeats, _ = collect(args.runs, args.seed, args.epochs, reseed=RESEED, prior=args.prior)
    repeats.select("run_id", "seed", "final_test_accuracy", "diverged").write_parquet(out / "runs_repeated.parquet")
    files = ["prenet/outcome/out_of_corpus.py", "prenet/telemetry/recorder.py", "scripts/generate_out_of_corpus.py"]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    prov = {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"python scripts/generate_out_of_corpus.py --runs {args.runs} --seed {args.seed} --epochs {args.epochs} --prior {args.prior}",
        "prior": args.prior,
        "code_commit": commit,
        "generator_sha256": {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() for f in files},
        "torch": torch.__version__,
        "threads": 1,
        "runs": runs.height,
        "diverged": int(runs["diverged"].sum()),
        "late_bloomer_share": late_bloomer_share(runs, tel),
        "median_final_accuracy": float(runs["final_test_accuracy"].median()),
        "repeated_with_seed_offset": RESEED,
        "seed_ceiling": seed_ceiling(runs, repeats),
        "generation_wall_s": round(time.monotonic() - t0, 1),
    }
    (out / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    print(f"{runs.height} out-of-corpus runs ({prov['diverged']} diverged, late bloomers {100 * prov['late_bloomer_share']:.0f} %) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
