"""Carry a chapter's edited prose into its executed notebook without running it again.

A chapter's markdown is not an input of its execution (`execution_key.fingerprint`), so a prose edit leaves
the chapter current. The committed `.ipynb` (what the book renders and nbval compares) must still show the new
prose: `sync` rebuilds it from the source's cells, taking every code cell, outputs and all, from the executed
notebook. It refuses when a code cell differs, which only a new execution can settle.
"""

from __future__ import annotations

from pathlib import Path

from servelab.book.execution_key import code_identity

INJECTED = "injected-parameters"  # the cell papermill adds after the parameters cell


class CodeChanged(ValueError):
    pass


def _tags(cell) -> list[str]:
    return sorted(cell.metadata.get("tags", []))


def merged(source: Path):
    """The executed notebook of `source` with the source's markdown cells; raises CodeChanged when the code
    cells (source or tags) are not those it was executed with."""
    import jupytext
    import nbformat

    executed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    ran = [c for c in executed.cells if c.cell_type == "code" and INJECTED not in c.metadata.get("tags", [])]
    injected = [c for c in executed.cells if INJECTED in c.metadata.get("tags", [])]
    wanted = jupytext.read(source).cells
    code = [c for c in wanted if c.cell_type == "code"]
    if len(code) != len(ran):
        raise CodeChanged(f"{source.stem}: {len(code)} code cells in the source, {len(ran)} executed; "
                          f"re-execute it: python -m servelab notebooks {source.stem}")
    for i, (new, old) in enumerate(zip(code, ran, strict=True), 1):
        if code_identity(new) != code_identity(old):
            first = (new.source.splitlines() or [""])[0][:50]
            raise CodeChanged(f"{source.stem}: code cell {i} ({first!r}) differs from the executed one; "
                              f"re-execute it: python -m servelab notebooks {source.stem}")
    kept: dict[str, list] = {}  # unchanged prose keeps its executed cell (id and papermill's metadata)
    for cell in executed.cells:
        if cell.cell_type != "code":
            kept.setdefault(cell.source, []).append(cell)
    cells, taken = [], iter(ran)
    for cell in wanted:
        if cell.cell_type != "code":
            same = kept.get(cell.source)
            cells.append(same.pop(0) if same and same[0].cell_type == cell.cell_type else
                         nbformat.from_dict({**nbformat.v4.new_markdown_cell(cell.source, metadata=dict(cell.metadata)),
                                             "cell_type": cell.cell_type}))
            continue
        cells.append(next(taken))
        if "parameters" in _tags(cell):
            cells += injected
    executed.cells = cells
    return executed


def sync(source: Path) -> bool:
    """Write the source's prose into its executed notebook; True when that changed the notebook."""
    import nbformat

    target = source.with_suffix(".ipynb")
    nb = merged(source)
    text = nbformat.writes(nb) + "\n"
    if text == target.read_text():
        return False
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text)
    tmp.replace(target)
    return True
