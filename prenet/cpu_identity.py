"""This machine's CPU as a hardware id, from ``/proc/cpuinfo`` alone (stdlib only: the run log of every stage reads it
without importing the hardware catalog)."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def cpuinfo() -> dict[str, str]:
    """``/proc/cpuinfo``'s first value of each field (empty where the file does not exist)."""
    info: dict[str, str] = {}
    p = Path("/proc/cpuinfo")
    if p.exists():
        for line in p.read_text().splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info.setdefault(k.strip(), v.strip())
    return info


def slug(s: str) -> str:
    """``s`` lower-cased with every run of other characters than letters and digits as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def cpu_model(info: dict[str, str] | None = None) -> str:
    """This CPU's model name (``info``: :func:`cpuinfo`, read here when not given)."""
    return (cpuinfo() if info is None else info).get("model name") or platform.processor() or platform.machine()


def cpu_id(info: dict[str, str] | None = None) -> str:
    """This CPU's hardware id (model and logical CPUs), without measuring anything: what a hardware record must match."""
    return f"cpu-{slug(cpu_model(info))}-{os.cpu_count() or 1}c"
