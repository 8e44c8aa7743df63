"""Names the early-success corpus may use (defined once in :mod:`prenet.names`; the corpus, its schema and the config
check read them)."""

from prenet.names import CORPUS_OPTIMIZERS as OPTIMIZERS
from prenet.names import SCHEDULES

__all__ = ["OPTIMIZERS", "SCHEDULES"]
