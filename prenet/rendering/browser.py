"""Open a report in headless Chromium and check what a reader would see: every figure loaded, no console errors.

The page itself records, on its ``load`` event, how many ``<img>`` elements it has and how many decoded
(``data-figures`` / ``data-loaded`` on ``<body>``, see :data:`prenet.rendering.html.LOAD_CHECK`); Chromium's
``--dump-dom`` prints the DOM after the load event and ``--enable-logging=stderr`` prints every console
message (``console.error``/``log``, uncaught exceptions), each of which counts as an error.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from prenet.errors import PrenetError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
#: Chromium logs every console message (any level, uncaught exceptions included) as ``…:INFO:CONSOLE(line)] "msg"``;
#: the level is not in the line, and the report logs nothing on purpose, so every console message counts as an error.
_CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(?P<msg>.*)")


@dataclass
class BrowserCheck:
    """What headless Chromium saw: images on the page, images decoded, console errors (messages)."""

    figures: int
    loaded: int
    console_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    #: figures shown smaller than their pixels (alt texts) and text cut at the window's edge, at 100 % zoom
    scaled_figures: list[str] = field(default_factory=list)
    clipped_text: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return (
            self.figures > 0
            and self.loaded == self.figures
            and not self.console_errors
            and not self.external_requests
            and not self.scaled_figures
            and not self.clipped_text
        )


def find_chromium() -> str | None:
    """Path of a Chromium binary on PATH (Debian's ``chromium`` package installs ``/usr/bin/chromium``)."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


#: The reader's window (CSS pixels, zoom 100 %): a laptop screen.
WINDOW = (1280, 900)


def _headless(exe: str, profile: str) -> list[str]:
    """Chromium headless with a throw-away profile, background services (updates, sync, QUIC probes) off — on a
    closed network they only fail and log — and every request leaving the machine failing: the page opens offline."""
    return [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--disable-quic",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
    ]


def check_page(html_path: str | Path, *, chromium: str | None = None, timeout_s: float = 60.0, screenshot: str | Path | None = None) -> BrowserCheck:
    """Render ``html_path`` in headless Chromium (``--headless --no-sandbox --disable-gpu``) in a :data:`WINDOW`-sized
    window with the network cut off, and report the figures loaded, figures scaled down, text cut at the window's
    edge and the console errors; with ``screenshot``, also save a full-height PNG of the page there."""
    exe = chromium or find_chromium()
    if exe is None:
        raise PrenetError("no Chromium found on PATH; install Debian's package: apt-get install -y chromium")
    page = Path(html_path).resolve()
    if not page.is_file():
        raise PrenetError(f"report {page} does not exist; render it with `prenet report` (or `dvc repro report`)")
    with tempfile.TemporaryDirectory(prefix="prenet-chromium-") as profile:
        cmd = [*_headless(exe, profile), "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]
        cmd += [f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", page.as_uri()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise PrenetError(f"Chromium did not finish rendering {page} within {timeout_s:.0f} s") from e
    dom, log = proc.stdout, proc.stderr
    m = re.search(r'data-figures="(\d+)"', dom)
    n = re.search(r'data-loaded="(\d+)"', dom)
    if proc.returncode != 0 and not m:
        raise PrenetError(f"Chromium exited with {proc.returncode} on {page}: {log.strip()[-500:]}")
    errors = []
    for line in log.splitlines():
        c = _CONSOLE.search(line)
        if c:
            errors.append(c.group("msg").strip())
    external = sorted(set(re.findall(r'(?:src|href)="(https?://[^"]+)"', dom)))
    scaled = re.search(r'data-scaled="([^"]*)"', dom)
    clipped = re.search(r'data-clipped="([^"]*)"', dom)
    shot = _screenshot(exe, page, Path(screenshot), timeout_s) if screenshot else None
    return BrowserCheck(
        figures=int(m.group(1)) if m else 0,
        loaded=int(n.group(1)) if n else 0,
        console_errors=errors,
        external_requests=external,
        scaled_figures=[s for s in html.unescape(scaled.group(1)).split("|") if s] if scaled else [],
        clipped_text=[s for s in html.unescape(clipped.group(1)).split("|") if s] if clipped else [],
        screenshot=shot,
    )


def _screenshot(exe: str, page: Path, out: Path, timeout_s: float) -> Path:
    """A PNG of the first screens of ``page`` at :data:`WINDOW` width (what a reader sees at 100 % zoom)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="prenet-chromium-") as profile:
        cmd = [*_headless(exe, profile), "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1] * 4}", f"--screenshot={out}", page.as_uri()]
        try:
            subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise PrenetError(f"Chromium did not finish a screenshot of {page} within {timeout_s:.0f} s") from e
    if not out.is_file():
        raise PrenetError(f"Chromium wrote no screenshot of {page} to {out}")
    return out
