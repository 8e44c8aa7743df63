"""Usage: python scripts/check_cost_draws.py [--cache DIR] [--seeds 0 101 202] [--only NAME] (about 15 minutes on one
CPU thread the first time, to fine-tune the four checks; then about 30 s per seed).

Issue 30's full-data cost checks (``convergence=full``'s ``cost_check``: two 30,000-sample Fashion-MNIST fine-tunes,
momentum 0 and 0.9) against the default ``forecast()``, over several subset draws (seeds). The first run pre-trains and
fine-tunes each check as the ``forecast_cost`` stage does and caches the model, data and real curves in ``--cache``;
later runs only forecast, so a change to the forecaster can be compared draw by draw on the same real runs. Prints,
per check and seed, the q·L0 median step error, the cost ratio and each target's (forecast, real) step, then the
median over the checks per seed and over the seeds. Writes only the cache."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import compose  # noqa: E402
from pipeline.forecast_cost import _median, _scored_forecast, real_finetune  # noqa: E402
from prenet.convergence.evaluation import steps_for, target_list  # noqa: E402
from prenet.convergence.nets import with_new_head  # noqa: E402
from prenet.convergence.tasks import Task, pretrain  # noqa: E402


def cache_checks(cfg, folder: Path) -> list[Path]:
    """Pre-train and fine-tune every cost check of ``cfg`` not yet in ``folder``; returns the cached files."""
    cc = cfg.convergence.cost_check
    files = []
    for name, t in cc.tasks.items():
        runs = [OmegaConf.to_container(r, resolve=True) for r in cc.runs]
        paths = [folder / f"{name}_m{r['momentum']:g}.pt" for r in runs]
        files += paths
        if all(p.exists() for p in paths):
            continue
        task = Task.from_cfg(str(name), OmegaConf.to_container(t, resolve=True))
        model, _ = pretrain(task, seed=int(cfg.seed))
        data = task.finetune_data()
        with_new_head(model, int(data.y.max()) + 1, seed=int(cfg.seed))
        for run, path in zip(runs, paths):
            real, steps, L, A = real_finetune(model, data, run, cc, int(cfg.seed))
            torch.save(
                {"model": model, "x": data.x, "y": data.y, "run": run, "steps": steps, "L": L, "A": A, "train_seconds": real.train_seconds}, path
            )
            print(f"cached {path.name}: {real.train_seconds:.0f} s of SGD", flush=True)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/prenet_cost_checks"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 101, 202])
    ap.add_argument("--only", default=None, help="only the checks whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = compose(["convergence=full"])
    args.cache.mkdir(parents=True, exist_ok=True)
    tcfg = OmegaConf.to_container(cfg.convergence.evaluate.targets, resolve=True)
    variant = {"name": "default", "subset": None, "correction": "trajectory"}
    res: dict[int, dict[str, float | None]] = {}
    for path in cache_checks(cfg, args.cache):
        if args.only and args.only not in path.stem:
            continue
        c = torch.load(path, weights_only=False)
        tlist = target_list(tcfg, float(c["L"][0]))
        real = {f"{k}={p:g}": steps_for(k, v, c["L"], c["A"]) for k, p, v in tlist}
        data = SimpleNamespace(x=c["x"], y=c["y"])
        for s in args.seeds:
            fc, pred, _, _, q_ok = _scored_forecast(c["model"], data, c["run"], c["steps"], s, variant, tlist, real)
            res.setdefault(s, {})[path.stem] = _median(q_ok)
            q = {t: (pred[t], real[t]) for t in pred if t.startswith("loss=")}
            err = _median(q_ok)
            print(f"{path.stem} seed {s}: q·L0 error {err if err is None else round(err, 1)} %, "
                  f"{c['train_seconds'] / fc.seconds:.1f}x cheaper; (forecast, real) {q}", flush=True)  # fmt: skip
    per_seed = {}
    for s, r in res.items():
        per_seed[s] = float(np.median([v for v in r.values() if v is not None]))
        print(f"seed {s}: median over the checks {per_seed[s]:.1f} %")
    print(f"median over the seeds {np.median(list(per_seed.values())):.1f} %")


if __name__ == "__main__":
    main()
