"""The strings code shows a reader (plot titles, axis labels, legends, banner rows), found in the source.

A string is extracted when it is a literal argument of one of the translating calls, `t(...)`,
`label(...)` / `plots.label(...)`, the first three arguments of `axes(...)` / `plots.axes(...)`,
or of the marker `N_(...)` (gettext's convention for "translate later": a label kept in a dict or
a list, e.g. `names = {"free": N_("free blocks")}`, then drawn with `plots.label(names[k])`).
Arguments built at run time (f-strings, `+`, `%`, `.format`) cannot be extracted; `extract` lists
them as problems so that a chapter translates the words and formats the numbers around them:
`f"{plots.label('measured')}, k = {k}"`, never `plots.label(f"measured, k = {k}")`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from servelab.machine.paths import REPO

# call name -> how many leading positional arguments are reader-facing strings
CALLS = {"t": 1, "label": 1, "N_": 1, "axes": 3}
# keyword arguments of those calls that are reader-facing too
KEYWORDS = {"axes": ("title", "xlabel", "ylabel")}


@dataclass(frozen=True)
class Found:
    msgid: str
    where: str  # path:line, relative to the repository


def sources() -> list[Path]:
    """Every Python file whose strings can reach a reader: the package and the chapters' sources."""
    files = sorted((REPO / "servelab").rglob("*.py")) + sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))
    return [p for p in files if "engine_side" not in p.parts and "sgl_kernel_stand_in" not in p.parts]


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in {
            "plots", "i18n", "diagrams"}:
        return func.attr
    return None


def _strings(node: ast.expr) -> list[str] | None:
    """The literal values `node` can take (a constant, or either branch of `a if c else b`), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _strings(node.body), _strings(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _built_at_run_time(node: ast.expr) -> bool:
    return isinstance(node, (ast.JoinedStr, ast.BinOp)) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format")


def scan(path: Path) -> tuple[list[Found], list[str]]:
    """(messages found, problems) in one file; a problem is `path:line: why`."""
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found: list[Found] = []
    problems: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call) or (name := _name(node.func)) not in CALLS:
            continue
        args = list(node.args[:CALLS[name]]) + [k.value for k in node.keywords if k.arg in KEYWORDS.get(name, ())]
        for arg in args:
            values = _strings(arg)
            if values is not None:
                found += [Found(v, f"{rel}:{arg.lineno}") for v in values if v.strip()]
            elif _built_at_run_time(arg):
                problems.append(f"{rel}:{arg.lineno}: {name}() gets a string built at run time, which no "
                                "catalog can hold; translate the words, format the numbers outside")
    return found, problems


def extract(paths: list[Path] | None = None) -> tuple[dict[str, list[str]], list[str]]:
    """msgid -> where it is used, and the problems, over `paths` (default: `sources()`)."""
    messages: dict[str, list[str]] = {}
    problems: list[str] = []
    for path in paths if paths is not None else sources():
        found, trouble = scan(path)
        problems += trouble
        for f in found:
            messages.setdefault(f.msgid, []).append(f.where)
    return messages, problems
