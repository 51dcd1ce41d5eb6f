"""Where things live: the repository, the movable cache, results."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"


def cache_home() -> Path:
    """The one folder holding engine venvs and converted models; move it with SERVELAB_HOME."""
    return Path(os.environ.get("SERVELAB_HOME", Path.home() / ".cache" / "servelab")).expanduser()


def results_dir() -> Path:
    """Where notebooks save their measurements; SERVELAB_RESULTS overrides."""
    return Path(os.environ.get("SERVELAB_RESULTS", REPO / "results")).expanduser()
