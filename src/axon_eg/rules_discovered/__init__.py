"""The rewrite rules, found by operator propagation and proved (see ``store`` for the files under ``DATA``)."""

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
"""The stored rules, one JSON file per family (``store`` reads and writes them; ``cache`` digests them)."""
