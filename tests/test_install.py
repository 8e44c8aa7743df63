"""`make install` hands pip's configured package sources to uv (scripts/pip_sources.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pip_sources", ROOT / "scripts" / "pip_sources.py")
pip_sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pip_sources)


def test_pip_sources_become_uv_flags_with_the_environment_winning():
    lines = [
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/opt/old'",
        ":env:.find-links='/opt/wheels'",
        "install.index-url='https://mirror.example/simple'",
        "not a setting",
    ]
    cfg = pip_sources.pip_config(lines)
    assert cfg == {
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
        "find-links": ["/opt/wheels"],
        "index-url": ["https://mirror.example/simple"],
    }
    assert pip_sources.uv_flags(cfg) == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
    ]  # fmt: skip


def test_no_pip_configuration_gives_no_flags():
    assert pip_sources.uv_flags(pip_sources.pip_config([])) == []
