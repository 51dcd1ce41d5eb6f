"""Saving measurements before they are plotted: data plus where, when and with what it was measured."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from servelab.book.provenance import provenance
from servelab.machine.paths import results_dir
from servelab.machine.profiles import Profile


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def save(name: str, data: pd.DataFrame | dict | list, profile: Profile, **notes: Any) -> Path:
    """Write results/<profile>/<name>.csv (a table) or .json, and <name>.meta.json beside it."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"result name {name!r} must be letters, digits, '-' or '_'")
    folder = results_dir() / profile.name
    if isinstance(data, pd.DataFrame):
        path = folder / f"{name}.csv"
        _atomic_write(path, data.to_csv(index=False))
    else:
        path = folder / f"{name}.json"
        _atomic_write(path, json.dumps(data, indent=2, default=str))
    meta = {"name": name, "file": path.name, **provenance(profile), **notes}
    _atomic_write(folder / f"{name}.meta.json", json.dumps(meta, indent=2, default=str))
    return path
