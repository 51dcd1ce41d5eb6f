"""The package's layers: imports only point down, engine-side code imports nothing from servelab,
chapters import only the chapter-facing layers, and no module grows past the size one concept needs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servelab.machine.paths import REPO

PACKAGE = REPO / "servelab"
# Lower ranks sit below higher ones. `sim` and `engines` share a rank and must not import each other.
RANKS = {"__init__": 0, "integers": 0, "machine": 1, "engines": 2, "sim": 2, "measure": 3, "book": 4, "doctor": 5,
         "cli": 6}
CHAPTER_FACING = {"engines", "sim", "measure", "book"}
# Scripts that run inside an engine's venv: they import nothing from servelab.
ENGINE_SIDE = ("engines/engine_side", "engines/sgl_kernel_stand_in", "machine/venv_scripts")
MAX_LINES = 330  # "about 300": one concept, with the docstring that explains it


def _imports(path: Path) -> list[str]:
    """Every servelab module `path` imports, at any depth of the file (function bodies included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "servelab"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "servelab":
            found += [node.module] if node.module != "servelab" else [f"servelab.{a.name}" for a in node.names]
    return found


def _layer(dotted: str) -> str:
    """servelab.X.Y -> X; the package itself and what it defines (__version__) -> __init__; __main__ -> cli."""
    parts = dotted.split(".")
    if len(parts) == 1 or not ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return "__init__"
    return "cli" if parts[1] == "__main__" else parts[1]


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not any(part in str(p) for part in ENGINE_SIDE))


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_every_module_belongs_to_a_layer():
    unknown = sorted(_dotted(p) for p in _modules() if _layer(_dotted(p)) not in RANKS)
    assert not unknown, f"modules outside every layer: {unknown}; see CONTRIBUTING.md (Layers)"


@pytest.mark.parametrize("path", _modules(), ids=_dotted)
def test_imports_point_down(path):
    here = _layer(_dotted(path))
    if here == "__init__":
        assert _imports(path) == [], "servelab/__init__.py imports nothing"
        return
    for target in _imports(path):
        there = _layer(target)
        assert there == here or RANKS[there] < RANKS[here], (
            f"{_dotted(path)} ({here}) imports {target} ({there}): imports must point down "
            f"({' < '.join(sorted(RANKS, key=RANKS.get))}; sim and engines never import each other)")


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if any(s in str(p) for s in ENGINE_SIDE)),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_engine_side_scripts_import_nothing_from_servelab(path):
    assert _imports(path) == []


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_chapters_import_only_chapter_facing_layers(path):
    layers = {_layer(t) for t in _imports(path)}
    assert layers <= CHAPTER_FACING, f"{path.name} imports {sorted(layers - CHAPTER_FACING)}"


@pytest.mark.parametrize("path", _modules(), ids=_dotted)
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES, f"split {_dotted(path)} by concept"


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: an import from a higher layer is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from servelab.book import plots\n")
    assert [_layer(t) for t in _imports(bad)] == ["book"]
    assert RANKS["book"] > RANKS["sim"]
