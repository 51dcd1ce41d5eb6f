"""The one reader of servelab's TOML data files (servelab/data/*.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from servelab.machine.paths import DATA


class BadDataFile(ValueError):
    pass


def load(name: str, folder: Path | None = None) -> dict[str, Any]:
    """The table in `folder/name` (default folder: servelab/data), or one error line naming the file."""
    path = (folder or DATA) / name
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise BadDataFile(f"data file {path} is missing; restore it: git checkout -- {path.name}") from None
    except tomllib.TOMLDecodeError as err:
        raise BadDataFile(f"{path}: not valid TOML: {err}") from None
