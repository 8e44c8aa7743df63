"""Walk a model into the layer calls the registry knows."""

from prenet.graph.walk import LayerCall, trace, walk

__all__ = ["LayerCall", "trace", "walk"]
