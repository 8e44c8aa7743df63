"""Hardware descriptions: the vendored catalog, YAML spec files and local detection."""

from prenet.hardware.catalog import catalog, get, resolve, resolve_name
from prenet.hardware.spec import HardwareSpec, load_spec_yaml

__all__ = ["HardwareSpec", "catalog", "get", "load_spec_yaml", "resolve", "resolve_name"]
