"""Offline report: figures (PNG) and one self-contained HTML page."""
