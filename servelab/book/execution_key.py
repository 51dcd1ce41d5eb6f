"""Execution keys: everything an executed chapter depends on, hashed, so that only a changed chapter is re-run.

A chapter's inputs are its jupytext source; every servelab module it imports, followed transitively (imports
inside functions too) with the packages' `__init__` files; the files those modules name in their strings
(engine-side scripts run inside an engine venv, the SGLang stand-in, data files under `servelab/data/`, the
scripts and styles a figure embeds);
every pins file and lock once `engine_envs.toml` is among them; the kernel venv's lock; and the results of
other chapters it read while it ran (recorded then, see `servelab.book.results`). The key is a hash of
what of those files can change a run (`fingerprint`) and the profile: the chapter's code cells, a Python
module's code without its comments and docstrings, any other file whole. So prose is not an input: a
chapter whose markdown (or a module whose docstrings) changed is not re-executed; `prose.sync` carries the
new markdown into the executed notebook, keeping its outputs. `chapters.execute` records the key in the
executed notebook's metadata (`servelab`: key, inputs, reads, saves, time) and in every result the run saved.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.machine.locks import KERNEL, LOCKS
from servelab.machine.paths import DATA, REPO

PACKAGE = REPO / "servelab"
# Code that is not imported but run by path (inside an engine venv); named by file name in strings.
BY_NAME = [PACKAGE / "engines" / "engine_side", PACKAGE / "machine" / "venv_scripts"]
STAND_IN = PACKAGE / "engines" / "sgl_kernel_stand_in"
# Files a module reads at run time and puts into a chapter's output (a figure's inline script and style), named by
# file name in its strings.
ASSETS = ("*.js", "*.css")
METADATA = "servelab"


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _with_packages(path: Path) -> list[Path]:
    """`path` and the `__init__.py` of every package above it (importing a module runs them)."""
    found = [path]
    for parent in path.parents:
        if parent == REPO or not (parent / "__init__.py").is_file():
            break
        found.append(parent / "__init__.py")
    return found


def _parse(path: Path, chapter: bool) -> ast.Module:
    if chapter:
        import jupytext  # a chapter source: parse its code cells, not its markdown

        nb = jupytext.read(path)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        return ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    return ast.parse(path.read_text())


def _imports_and_strings(tree: ast.Module, here: Path) -> tuple[list[Path], list[str], list[re.Pattern]]:
    """The files `tree` imports, its string constants, and its f-strings as patterns."""
    files: list[Path] = []
    strings: list[str] = []
    patterns: list[re.Pattern] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            if name.split(".")[0] == "servelab" and (found := _module_file(name)):
                files += _with_packages(found)
            elif (here / f"{name}.py").is_file():  # an engine-side script's sibling
                files.append(here / f"{name}.py")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and ".py" in v.value
                                                       for v in node.values):
            # only an f-string that spells a script's name (f"{engine}_memory_defaults.py") names files: one
            # of placeholders alone (f"{x:.0%}") would otherwise match every script
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".*" for v in node.values]
            patterns.append(re.compile("".join(parts)))
    return files, strings, patterns


def _named_files() -> list[Path]:
    return [p for folder in BY_NAME for p in sorted(folder.glob("*.py")) if p.name != "__init__.py"]


def closure(source: Path) -> list[Path]:
    """Every file the chapter at `source` depends on (see the module docstring), sorted."""
    named, data = _named_files(), sorted(DATA.glob("*.toml"))
    data += sorted(p for pattern in ASSETS for p in PACKAGE.rglob(pattern))
    seen: set[Path] = set()
    todo = [source]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        files, strings, patterns = _imports_and_strings(_parse(path, path == source), path.parent)
        text = "\n".join(strings)
        todo += [f for f in files if f not in seen]
        todo += [f for f in named if f.name in text or any(p.fullmatch(f.name) for p in patterns)]
        seen.update(f for f in data if f.name in text)
        if STAND_IN.name in text:
            seen.update(p for p in STAND_IN.rglob("*.py"))
    if DATA / "engine_envs.toml" in seen:
        seen.update(DATA.glob("pins/*.txt"))
        seen.update(LOCKS.glob("*.txt"))
    seen.add(LOCKS / f"{KERNEL}.txt")
    return sorted(seen)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_text(text: str) -> str:
    """Python source without its comments, docstrings and blank lines: what runs. Found with `ast` and
    `tokenize` but cut from the text itself, so the result does not depend on the Python version."""
    docstrings = _docstring_lines(ast.parse(text))
    lines = text.splitlines()
    inside: set[int] = set()  # lines of a multi-line string, kept as they are (blank lines included)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
        elif tok.start[0] != tok.end[0] and tok.type not in (tokenize.NEWLINE, tokenize.NL):
            inside.update(range(tok.start[0], tok.end[0]))  # its last line ends with code
    return "\n".join(line if i in inside else line.rstrip() for i, line in enumerate(lines, 1)
                     if i not in docstrings and (i in inside or line.strip()))


def code_identity(cell: Any) -> list:
    """What of one code cell its run depends on: its source and its sorted tags (`prose.merged` compares these)."""
    return [cell.source, sorted(cell.metadata.get("tags", []))]


def chapter_code(source: Path) -> str:
    """A chapter's code cells, each with its tags, in order: what its execution depends on (not its markdown)."""
    import jupytext

    return json.dumps([code_identity(c) for c in jupytext.read(source).cells if c.cell_type == "code"])


def fingerprint(path: Path, chapter: bool = False) -> str:
    """The hash of what of `path` can change a chapter's run (see the module docstring)."""
    if chapter:
        text = chapter_code(path)
    elif path.suffix == ".py":
        text = code_text(path.read_text())
    else:
        return digest(path)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _name(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def inputs(source: Path) -> dict[str, str]:
    """`repo-relative path -> fingerprint` for every file of the chapter's closure."""
    return {_name(p): fingerprint(p, chapter=p == source) for p in closure(source)}


def read_digests(reads: list[str]) -> dict[str, str]:
    """The current content hash of each repo-relative result a chapter read ("missing" when it is gone)."""
    return {r: digest(REPO / r) if (REPO / r).is_file() else "missing" for r in reads}


def key(files: dict[str, str], reads: dict[str, str], profile: str) -> str:
    text = json.dumps({"inputs": files, "reads": reads, "profile": profile}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def recorded(notebook: Path) -> dict[str, Any] | None:
    """The `servelab` metadata an executed notebook carries, or None when it was executed without one."""
    if not notebook.is_file():
        return None
    return json.loads(notebook.read_text()).get("metadata", {}).get(METADATA)


@dataclass(frozen=True)
class Status:
    chapter: str
    key: str
    why: str  # "" when the committed notebook is current

    @property
    def current(self) -> bool:
        return not self.why


def _changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(f"{p} {'changed' if p in old and p in new else 'added' if p in new else 'removed'}"
                  for p in set(old) | set(new) if old.get(p) != new.get(p))


def status(source: Path, profile: str, meta: dict[str, Any] | None = None) -> Status:
    """Whether the committed notebook of `source` was executed with the inputs it has now, and if not why.
    `meta`: its recorded metadata, when the caller has read it already."""
    meta = meta if meta is not None else recorded(source.with_suffix(".ipynb"))
    files = inputs(source)
    reads = read_digests(sorted((meta or {}).get("reads", {})))
    now = key(files, reads, profile)
    if meta is None:
        return Status(source.stem, now, "no execution key recorded")
    if meta.get("profile") != profile:
        return Status(source.stem, now, f"executed on profile {meta.get('profile')}, not {profile}")
    if meta.get("key") == now:
        return Status(source.stem, now, "")
    changed = _changes(meta.get("inputs", {}), files) + _changes(meta.get("reads", {}), reads)
    why = "; ".join(changed[:3]) + (f"; {len(changed) - 3} more" if len(changed) > 3 else "")
    return Status(source.stem, now, why or "key differs")


def plan(sources: list[Path], profile: str, everything: bool = False) -> list[Status]:
    """Each chapter's status; a chapter that reads results a re-executed chapter saves is re-executed too."""
    metas = {s.stem: recorded(s.with_suffix(".ipynb")) for s in sources}
    found = {s.stem: (status(s, profile, metas[s.stem]) if not everything else Status(s.stem, "", "--all"))
             for s in sources}
    saves = {name: set((meta or {}).get("saves", [])) for name, meta in metas.items()}
    reads = {name: set((meta or {}).get("reads", {})) for name, meta in metas.items()}
    changed = True
    while changed:
        changed = False
        for name, st in found.items():
            if not st.current:
                continue
            upstream = [o for o, s in found.items() if not s.current and reads[name] & saves[o]]
            if upstream:
                found[name] = Status(name, st.key, f"reads results of {', '.join(upstream)}, re-executed")
                changed = True
    return list(found.values())
