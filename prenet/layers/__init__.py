"""Registry of layer types prenet can benchmark, featurize and predict."""

from __future__ import annotations

from prenet.layers.base import DTYPE_BYTES, LayerCost, LayerType, direction_bytes, direction_flops
from prenet.layers.conv2d import CONV2D
from prenet.layers.dense import DENSE
from prenet.layers.elementwise import ELEMENTWISE
from prenet.layers.sequence import EMBEDDING, GRU, LSTM, MHA, RNN
from prenet.layers.spatial import AVGPOOL2D, BATCHNORM2D, MAXPOOL2D
from prenet.names import DIRECTIONS, LAYER_OPS

#: PreNeT's six (dense, conv, RNN/LSTM/GRU, attention, embedding, layer norm) and what whole models also need.
REGISTRY: dict[str, LayerType] = {
    lt.op: lt for lt in (DENSE, CONV2D, RNN, LSTM, GRU, MHA, EMBEDDING, BATCHNORM2D, MAXPOOL2D, AVGPOOL2D, *ELEMENTWISE)
}
if sorted(REGISTRY) != sorted(LAYER_OPS):  # the schemas' vocabulary (prenet/names.py) names exactly these
    raise ImportError(f"prenet.names.LAYER_OPS must list the registry's layer types: {sorted(REGISTRY)}")

#: Every shape column any op uses (union in a stable order): the wide tables carry all of them, null where
#: an op does not have the column.
ALL_SHAPE_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(c for lt in REGISTRY.values() for c in lt.all_columns))


def layer_type(op: str) -> LayerType:
    """The registry entry for ``op``; a clear error names the known ops otherwise."""
    try:
        return REGISTRY[op]
    except KeyError:
        raise KeyError(f"unknown layer op {op!r}; known ops: {', '.join(sorted(REGISTRY))}") from None


__all__ = [
    "ALL_SHAPE_COLUMNS",
    "DIRECTIONS",
    "DTYPE_BYTES",
    "REGISTRY",
    "LayerCost",
    "LayerType",
    "direction_bytes",
    "direction_flops",
    "layer_type",
]
