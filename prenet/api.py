"""prenet's Python API.

    >>> from prenet.api import predict_step_time, predict_layers
    >>> p = predict_step_time("resnet18", batch_size=32, hardware="H100 SXM5 80GB", dataset_size=50_000)
    >>> p.step_seconds, p.epoch_seconds, p.layers[0]

``model`` is a zoo name (:data:`prenet.zoo.ZOO`), ``path/to/file.py:function`` or an ``(nn.Module,
example_batch)`` pair; ``hardware`` a catalog name, ``local``, a YAML spec path or a
:class:`~prenet.hardware.HardwareSpec`. The trained regressors come from ``models_dir`` (default: the
``train`` stage's output, ``data/models/steptime``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from prenet.hardware import HardwareSpec, resolve
from prenet.paths import REPO_ROOT
from prenet.steptime.model import StepTimeModel
from prenet.steptime import predict as _p

DEFAULT_MODELS = REPO_ROOT / "data" / "models" / "steptime"


def _hardware(hardware: str | HardwareSpec, threads: int) -> HardwareSpec:
    return hardware if isinstance(hardware, HardwareSpec) else resolve(hardware, threads=threads)


def predict_step_time(model: Any, *, batch_size: int, hardware: str | HardwareSpec = "local", optimizer: str = "sgd",
                      dataset_size: int | None = None, threads: int = 1, models_dir: str | Path = DEFAULT_MODELS,
                      overhead_ms: float = 0.0) -> _p.StepTimePrediction:
    """Predicted time of one training step (and of an epoch with ``dataset_size``) of ``model``."""
    module, batch = model if isinstance(model, tuple) else _p.build_model(str(model), batch_size)
    return _p.predict_step_time(module, batch, hardware=_hardware(hardware, threads), model=StepTimeModel.load(models_dir),
                                optimizer=optimizer, threads=threads, dataset_size=dataset_size, overhead_ms=overhead_ms)


def predict_layers(table: pl.DataFrame, *, hardware: str | HardwareSpec, threads: int = 1,
                   models_dir: str | Path = DEFAULT_MODELS) -> pl.DataFrame:
    """``table`` (the ``prenet predict layers`` CSV format) plus ``predicted_ms``."""
    return _p.predict_layers(table, hardware=_hardware(hardware, threads), model=StepTimeModel.load(models_dir), threads=threads)
