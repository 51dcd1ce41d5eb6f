"""Circular evidence in the claims ledger: a row citing a chapter that reads that very row.

Apart from servelab/book/claims.py because it walks the chapters' imports (execution_key), which the
chapter that reads the ledger (08) should not depend on.
"""

from __future__ import annotations

from pathlib import Path

from servelab.book import execution_key
from servelab.book.claims import Ledger
from servelab.machine.paths import REPO


def _code(path: Path) -> str:
    """A Python file without its comment lines (a chapter's prose is comments in its jupytext source)."""
    return "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                     if not line.lstrip().startswith("#"))


def circular(ledger: Ledger) -> list[str]:
    """One line per claim whose evidence is a chapter that reads that very claim: the code of the chapter or
    of a servelab module it imports names the claim's id (chapter 08's selection guide quotes ledger rows).
    Prose that merely names a row is not reading it."""
    found = []
    for c in ledger.claims:
        for e in c.evidence:
            if e.kind != "notebook":
                continue
            files = [f for f in execution_key.closure(REPO / f"{e.ref}.py") if f.suffix == ".py"]
            if any(c.id in _code(f) for f in files):
                found.append(f"claim {c.id!r}: its evidence {e.ref} reads this claim (circular)")
    return found

