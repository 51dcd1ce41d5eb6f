"""`python -m servelab translations ACTION`: what a chapter author and a translator run.

update [DOMAIN ...]        re-extract the English messages (pages, notebooks, code) and merge them into
                           locales/<lang>/LC_MESSAGES/ for ja, ko, de, es (edited paragraphs become fuzzy);
                           with DOMAINs (book/intro), into those catalogs alone
check                      one line per catalog; exit status 1 unless every catalog is complete
todo LANG DOMAIN           the entries of one catalog a translator still has to do, as a .po chunk
apply LANG DOMAIN FILE.po  copy the translated entries of such a chunk back into the catalog
notebooks [LANG]           write notebooks/<lang>/NN_name.ipynb (every language by default)
"""

from __future__ import annotations

from servelab.book import catalogs, translated_notebooks


def translations(action: str, args: list[str]) -> int:
    wanted = {"update": 0, "check": 0, "todo": 2, "apply": 3, "notebooks": (0, 1)}[action]
    if action != "update" and len(args) not in (wanted if isinstance(wanted, tuple) else (wanted,)):
        raise ValueError(f"translations {action} takes {wanted} argument(s), got {len(args)}: {' '.join(args)}; "
                         "see `python -m servelab translations --help`")
    if action == "update":
        counts, problems = catalogs.update(only=tuple(args))
        for domain, n in counts.items():
            print(f"[translations] {domain}: {n} entries")
        for problem in problems:
            print(f"[translations] not extractable: {problem}")
        return 0
    if action == "check":
        stats = catalogs.stats()
        for s in stats:
            print(("ok   " if s.complete else "TODO ") + s.line())
            for line in s.markup:
                print(f"     {line}")
        return 0 if stats and all(s.complete for s in stats) else 1
    if action == "todo":
        print(catalogs.todo(args[0], args[1]), end="")
        return 0
    if action == "apply":
        from pathlib import Path

        done, fuzzy = catalogs.apply(args[0], args[1], Path(args[2]))
        skipped = f"; {fuzzy} still marked fuzzy were skipped (delete an entry's `#, fuzzy` line once it is right)"
        print(f"[translations] {done} entries applied" + (skipped if fuzzy else ""))
        return 0
    for lang in args or catalogs.TRANSLATED:
        for path, left in translated_notebooks.write(lang).items():
            print(f"[translations] {path}: {left} blocks still in English")
    return 0
