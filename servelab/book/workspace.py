"""A participant's own run of the lab, kept apart from the book's committed notebooks and results.

`./lab.sh` (`python -m servelab lab`) writes everything it produces into one folder the checkout's git ignores,
the workspace, `work/` at the top of the checkout:

    work/notebooks/NN_name.ipynb          every chapter, executed on this machine
    work/notebooks/<lang>/NN_name.ipynb   the chapters in ja, ko, de and es, to run (a kernel started there draws
                                          its labels in that language: `servelab.book.i18n`)
    work/results/<profile>/               what the chapters measured (`SERVELAB_RESULTS`, unless it is set)
    work/_build/html/<lang>/              the book in five languages, showing this machine's run
    work/_build/html/index.html           the page that links them

The book is built with the workspace as Sphinx's source folder: `_config.yml`, `_toc.yml`, `book/`, `_templates/`
and `locales/` there are links to the checkout's, `notebooks/` is the workspace's own. So a run leaves the
committed notebooks, `results/` and everything else git tracks as they were, and `git pull` never meets a
participant's measurements. `in_place` is the maintainers' run (`./lab.sh --in-place`): it regenerates the
committed notebooks and `results/` and builds the book into `_build/html/`, as `python -m servelab notebooks`
and `python -m servelab book` do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from servelab.book import chapters, translated_notebooks
from servelab.book.catalogs import TRANSLATED
from servelab.machine.paths import REPO, results_dir

WORKSPACE = REPO / "work"
# What the workspace's book shares with the checkout's (links); its notebooks are its own.
LINKED = ("_config.yml", "_toc.yml", "book", "_templates", "locales")


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def html(self) -> Path:
        return self.root / "_build" / "html"


def stage(space: Workspace) -> None:
    """Make the workspace a Sphinx source folder: a relative link to each of the checkout's LINKED paths (kept
    when it is right, replaced when it points elsewhere), and a folder for its own notebooks. Anything else in
    the way is refused, by name, before a chapter runs."""
    space.notebooks.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link, target = space.root / name, REPO / name
        if link.is_symlink():
            if link.resolve() == target.resolve():
                continue
            link.unlink()
        elif link.exists():
            raise ValueError(f"{link} is in the way of the workspace's link to {target}; move it away")
        link.symlink_to(os.path.relpath(target, space.root), target_is_directory=target.is_dir())


def lab(profile: str, languages: tuple[str, ...] = (), *, in_place: bool = False, root: Path | None = None) -> Path:
    """Execute every chapter on `profile`, build the book (in `languages`, default all five) and write the
    translated notebooks: into the workspace (default `work/`), or with `in_place` over the committed notebooks
    and results. Returns the folder of the built books. Set-up is the caller's (`cli`)."""
    if in_place:
        chapters.run_notebooks(profile)
        html = chapters.build_book(languages=languages)
        for lang in TRANSLATED:
            translated_notebooks.write(lang)
        print(f"[lab] in place: notebooks/, {results_dir()}, {html}", flush=True)
        return html
    space = Workspace(root or WORKSPACE)
    stage(space)
    saved = os.environ.get("SERVELAB_RESULTS")
    # The chapters' kernels inherit it; absolute, since they run in notebooks/, not in the caller's folder.
    os.environ["SERVELAB_RESULTS"] = str(Path(saved).expanduser().resolve() if saved else space.results)
    try:
        chapters.run_notebooks(profile, out=space.notebooks)
        where = results_dir()
    finally:
        if saved is None:
            os.environ.pop("SERVELAB_RESULTS", None)
        else:
            os.environ["SERVELAB_RESULTS"] = saved
    html = chapters.build_book(space.root, languages=languages, source=space.root)
    for lang in TRANSLATED:
        translated_notebooks.write(lang, out=space.notebooks)
    print(f"[lab] executed notebooks: {space.notebooks}; results: {where}; book: {html / 'index.html'}; "
          f"to run: {space.notebooks}/<lang>/", flush=True)
    return html
