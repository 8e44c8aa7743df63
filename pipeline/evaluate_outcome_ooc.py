"""Stage ``evaluate_outcome_ooc``: the early-success predictor on runs unlike the corpus (issue 29) — a user's plain
torch loop over digits, an independent generator (``scripts/generate_out_of_corpus.py``, never fitted on), answered
with nothing stated at epochs 1, 2, 3 and 5: ``data/outcome/out_of_corpus``, whose settings were outside the corpus
prior until the corpus's ``user_loop`` recipe (2026-12-05) spanned their ranges, and ``data/outcome/beyond_corpus``
(record key ``beyond``), settings outside every corpus recipe's ranges (deeper MLPs, other activations, Nesterov
momentum or RMSprop, other batch sizes and init scales)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import read_artifact
from pipeline.config import hydra_entry
from pipeline.pool import run_items
from pipeline.record import record_metrics
from prenet.data.io import read_table
from prenet.data.schemas import OocRepeats, OocRuns, OutcomeTelemetry
from prenet.outcome.out_of_corpus import ablate_on, late_bloomer_share, score, seed_ceiling, seed_spread


def _shipped(folder: str, max_runs: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs, telemetry) of a shipped out-of-corpus folder, the first ``max_runs`` runs only when given (a test of the
    stage; the record's ``runs`` says how many)."""
    runs = read_table(f"{folder}/runs.parquet", OocRuns)
    tel = read_table(f"{folder}/telemetry.parquet", OutcomeTelemetry)
    if max_runs is not None:
        runs = runs.head(int(max_runs))
        tel = tel.filter(pl.col("run_id").is_in(runs["run_id"].implode()))
    return runs, tel


def _scored(runs: pl.DataFrame, tel: pl.DataFrame, folder: str, cfg: DictConfig) -> dict:
    """:func:`score` of one shipped set, with its seed-to-seed yardstick where the folder has the repeated runs."""
    res = score(runs, tel, cfg.paths.outcome_models, n_boot=int(cfg.outcome.out_of_corpus.n_boot), seed=int(cfg.seed))
    repeated = Path(folder) / "runs_repeated.parquet"
    if repeated.exists():  # the same settings trained again with another seed: how much no prediction can explain
        res["seed_ceiling"] = seed_ceiling(runs, read_table(repeated, OocRepeats))
    return res


def evaluate_outcome_ooc(cfg: DictConfig) -> dict:
    """Score; write ``metrics/outcome_ooc.json`` (the full record in ``plots/outcome_ooc.json``)."""
    folder = cfg.paths.outcome_ooc
    oc = cfg.outcome.out_of_corpus
    runs, tel = _shipped(folder, oc.get("max_runs"))
    corpus_runs = read_artifact(cfg, "outcome_runs")
    corpus_tel = read_artifact(cfg, "outcome_telemetry")
    dev = corpus_runs.filter(pl.col("split") != "holdout")  # what the trained models were fitted on
    params = OmegaConf.to_container(cfg.outcome.predictor, resolve=True)

    def refits(fn, items):  # independent refits, in `outcome.workers` processes (timing-insensitive)
        return run_items(
            fn,
            items,
            workers=int(cfg.outcome.workers),
            threads=int(cfg.threads),
            desc="evaluate_outcome_ooc refits",
            progress=bool(cfg.progress),
            unit="fit",
        )

    res = _scored(runs, tel, folder, cfg)
    res["corpus_late_bloomer_share"] = late_bloomer_share(corpus_runs, corpus_tel)
    beyond = cfg.paths.outcome_ooc_beyond
    res["beyond"] = _scored(*_shipped(beyond, oc.get("max_runs")), beyond, cfg)
    if oc.ablate_groups:
        res["group_ablation"] = ablate_on(
            runs,
            tel,
            dev,
            corpus_tel,
            cfg.paths.outcome_models,
            epoch=int(oc.ablate_epoch),
            groups=list(oc.ablate_groups),
            params=params,
            n_boot=int(oc.n_boot),
            seed=int(cfg.seed),
            mapper=refits,
        )
    if oc.get("seed_spread") and int(oc.seed_spread.fits) > 0:  # the headline's share of the fit's own randomness (its first fit)
        step = max(int(params.get("bag", 1)), 1)  # each refit a whole seed bag, the bags' seeds apart
        seeds = [int(cfg.seed) + i * step for i in range(int(oc.seed_spread.fits))]
        res["seed_spread"] = seed_spread(
            runs,
            tel,
            dev,
            corpus_tel,
            cfg.paths.outcome_models,
            epochs=[int(e) for e in oc.seed_spread.epochs],
            seeds=seeds,
            params=params,
            mapper=refits,
            known={int(cfg.seed): {int(e): m["r2"][0] for e, m in res["by_epoch"].items()}},  # the trained models: the headline
        )
    res["summary"] = {f"r2_epoch{e}": m["r2"][0] for e, m in res["by_epoch"].items()} | {
        f"auc_epoch{e}": m["failure_auc"][0] for e, m in res["by_epoch"].items()
    }
    res["summary"] |= {f"plain_log_r2_epoch{e}": m["plain_log_r2"][0] for e, m in res["by_epoch"].items()}
    res["summary"] |= {
        f"beyond_{name}_epoch{e}": m[k][0] for e, m in res["beyond"]["by_epoch"].items() for k, name in (("r2", "r2"), ("failure_auc", "auc"))
    }
    for e, m in res.get("seed_spread", {}).get("by_epoch", {}).items():  # the range over the refits' seeds
        res["summary"] |= {f"r2_epoch{e}_seed_min": m["min"], f"r2_epoch{e}_seed_max": m["max"]}
    record_metrics(cfg, "outcome_ooc", res)
    e2, b2 = res["by_epoch"]["2"], res["beyond"]["by_epoch"]["2"]
    print(
        f"evaluate_outcome_ooc: {res['runs']} out-of-corpus runs; epoch 2 R² {e2['r2'][0]:.2f} (naive {e2['naive_r2'][0]:.2f}), "
        f"failure AUC {e2['failure_auc'][0]:.3f}; seed-to-seed R² ceiling {res.get('seed_ceiling', {}).get('r2_ceiling', float('nan')):.2f}; late bloomers {100 * res['late_bloomer_share']:.0f} % (corpus {100 * res['corpus_late_bloomer_share']:.0f} %); "
        f"{res['beyond']['runs']} runs beyond every corpus recipe: epoch 2 R² {b2['r2'][0]:.2f} (naive {b2['naive_r2'][0]:.2f}), failure AUC {b2['failure_auc'][0]:.3f}"
    )
    return res


if __name__ == "__main__":
    hydra_entry(evaluate_outcome_ooc)()
