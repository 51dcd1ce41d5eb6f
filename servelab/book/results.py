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


def _trace(op: str, path: Path) -> None:
    """While `chapters.execute` runs a chapter (SERVELAB_TRACE names a file), note each result it saves or reads:
    its execution key covers the results of other chapters it read."""
    if trace := os.environ.get("SERVELAB_TRACE"):
        with open(trace, "a") as f:
            where = Path(path).resolve().relative_to(results_dir().resolve())
            f.write(json.dumps({"op": op, "path": str(where)}) + "\n")


def note_read(path: Path) -> Path:
    """Call before reading a result another chapter saved (results/<profile>/<file>); returns it."""
    _trace("read", path)
    return path


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
    chapter = {"chapter": os.environ["SERVELAB_CHAPTER"]} if os.environ.get("SERVELAB_CHAPTER") else {}
    meta = {"name": name, "file": path.name, **provenance(profile), **chapter, **notes}
    _atomic_write(folder / f"{name}.meta.json", json.dumps(meta, indent=2, default=str))
    _trace("save", path)
    _trace("save", folder / f"{name}.meta.json")
    return path


def stamp(meta_path: Path, **fields: Any) -> None:
    """Add `fields` (the execution key) to a saved result's .meta.json once the chapter that saved it finished."""
    meta = json.loads(meta_path.read_text())
    _atomic_write(meta_path, json.dumps({**meta, **fields}, indent=2, default=str))
