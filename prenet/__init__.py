"""prenet: predict a training job's step time, steps to converge and early success.

The library is pure and importable: no orchestration lives here (see ``pipeline/`` for the
DVC/Hydra/Prefect stage entry points).
"""

__version__ = "0.1.0"
