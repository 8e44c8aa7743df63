"""Thin stage entry points and Prefect flows over the prenet library.

Each stage is one function ``<stage>(cfg) -> dict`` in ``pipeline/<stage>.py``. It serves three callers:

* ``dvc repro`` — ``python -m pipeline.run <stage>`` loads ``params.yaml`` and calls it;
* the Hydra CLI — ``python -m pipeline.<stage> key=value ...`` composes ``conf/`` and calls it;
* Prefect — ``pipeline.flows.retrain`` runs each stage through ``dvc repro`` so DVC's record stays true.

The stages, in pipeline order, are listed in :mod:`pipeline.stages`, which no stage imports: every stage imports this
package, so a list here would make adding a stage re-run all of them.
"""
