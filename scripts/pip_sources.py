"""Print pip's configured package sources as uv flags, so `make install` with uv reads the same indexes as pip.

uv does not read pip.conf or PIP_* variables. This asks pip (``pip config list``: files and environment, the
environment winning) for ``index-url``, ``extra-index-url`` and ``find-links`` and prints them as
``--index-url U --extra-index-url U … --find-links P …`` on one line (nothing when pip uses its defaults).

    python scripts/pip_sources.py            # e.g. --extra-index-url file:///opt/pypi/simple --find-links /opt/wheels
"""

from __future__ import annotations

import shlex
import subprocess
import sys

KEYS = ("index-url", "extra-index-url", "find-links")


def pip_config(lines: list[str]) -> dict[str, list[str]]:
    """Parse ``pip config list`` lines (``scope.key='v1 v2'``) into key → values; ``:env:`` entries override files."""
    found: dict[str, dict[bool, list[str]]] = {}
    for line in lines:
        name, sep, value = line.partition("=")
        if not sep:
            continue
        scope, _, key = name.rpartition(".")
        if key not in KEYS:
            continue
        values = shlex.split(value)
        words = [w for v in values for w in v.split()]
        found.setdefault(key, {})[scope == ":env:"] = words
    return {k: v.get(True, v.get(False, [])) for k, v in found.items()}


def uv_flags(config: dict[str, list[str]]) -> list[str]:
    """uv command-line flags for the sources in ``config`` (output of :func:`pip_config`)."""
    flags: list[str] = []
    for key in KEYS:
        for value in config.get(key, [])[: 1 if key == "index-url" else None]:
            flags += [f"--{key}", value]
    return flags


def main() -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    print(shlex.join(uv_flags(pip_config(out.stdout.splitlines()))))


if __name__ == "__main__":
    main()
