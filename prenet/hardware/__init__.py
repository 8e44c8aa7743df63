"""Hardware descriptions: the vendored catalog, YAML spec files and local detection.

:func:`resolve` dispatches between the three; it lives here so that ``catalog`` and ``local`` do not import each
other (``local`` reads the catalog for a detected GPU's spec sheet)."""

from pathlib import Path

from prenet.hardware.catalog import catalog, get, resolve_name
from prenet.hardware.power import with_sustained_clock
from prenet.hardware.spec import HardwareSpec, load_spec_yaml

__all__ = ["HardwareSpec", "catalog", "get", "load_spec_yaml", "resolve", "resolve_name"]


def resolve(target: str, *, threads: int = 1, local_record: str | Path | None = None) -> HardwareSpec:
    """Hardware from a catalog name, ``local`` (this machine with ``threads`` threads: the benchmark's record of it in
    ``local_record`` when that matches, else this CPU's first measurement at that thread count, kept in the user's
    store: :func:`~prenet.hardware.local.stored_cpu`) or a path to a ``.yaml`` spec file."""
    if target == "local":
        from prenet.hardware.local import recorded_cpu, stored_cpu

        return recorded_cpu(local_record, threads) or stored_cpu(threads)
    if target.endswith((".yaml", ".yml")):
        return with_sustained_clock(load_spec_yaml(target), catalog().values())
    return get(target)
