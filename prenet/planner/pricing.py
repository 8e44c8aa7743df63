"""Prices per GPU-hour for the plan's cost: the ``conf/pricing/*.yaml`` format, checked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from prenet.errors import PrenetError


def load_prices(path: str | Path) -> dict[str, dict[str, Any]]:
    """``prices:`` of a pricing YAML file (``conf/pricing/*.yaml`` format): hardware name → {usd_per_hour, source, as_of}."""
    from omegaconf import OmegaConf

    p = Path(path)
    if not p.is_file():
        raise PrenetError(f"pricing file {p} does not exist (format: conf/pricing/on_demand.yaml)")
    raw = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    prices = raw.get("prices") if isinstance(raw, dict) else None
    if not isinstance(prices, dict):
        raise PrenetError(f"{p} has no 'prices:' mapping (format: conf/pricing/on_demand.yaml)")
    return catalog_keys(check_prices(prices, str(p)), str(p))


def catalog_keys(prices: dict[str, dict[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """``prices`` keyed by catalog names (aliases and case resolved; ``local`` and spec-file paths kept): a key that
    names no catalog GPU stops with one line naming it and the closest catalog names, instead of leaving that GPU
    silently unpriced."""
    from prenet.errors import UnknownHardwareError
    from prenet.hardware.catalog import resolve_name

    out = {}
    for name, entry in prices.items():
        key = name.strip()
        if key != "local" and not key.endswith((".yaml", ".yml")):
            try:
                key = resolve_name(key)
            except UnknownHardwareError as e:
                raise PrenetError(f"{where}: price key {e}") from None
        out[key] = entry
    return out


def check_prices(prices: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Each entry as {usd_per_hour: float ≥ 0, ...}; a bare number is accepted as the price."""
    out = {}
    for name, v in prices.items():
        entry = dict(v) if isinstance(v, dict) else {"usd_per_hour": v}
        try:
            price = float(entry["usd_per_hour"])
        except (KeyError, TypeError, ValueError):
            raise PrenetError(f"{where}: price of {name!r} must be a number of USD per hour (usd_per_hour), got {v!r}") from None
        if not math.isfinite(price) or price < 0:
            raise PrenetError(f"{where}: price of {name!r} must be ≥ 0 USD per hour, got {price}")
        out[str(name)] = {**entry, "usd_per_hour": price}
    return out
