"""`./lab.sh` in a clone leaves the committed notebooks and results/ as they were: it writes executed notebooks,
results, translated notebooks and the book into the git-ignored workspace (servelab/book/workspace.py).

The lab's own path (`python -m servelab lab`) runs here on tiny stand-in chapters, executed for real by papermill
and recorded as the real ones are; only set-up (which builds engine venvs) is replaced. The fast test also stands
in for Sphinx; the `book` one builds the workspace's book for real, from stand-ins named like the real chapters.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from servelab import cli
from servelab.book import chapters, sphinx_run, workspace
from servelab.book.catalogs import TRANSLATED
from servelab.machine import provision
from servelab.machine.paths import REPO

CHAPTER = '''# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stand-in chapter {stem}
#
# A chapter of the tests: it saves one result and prints where.

# %% tags=["parameters"]
profile = "auto"

# %%
from servelab.book import results
from servelab.machine import profiles

saved = results.save("{stem}_numbers", {{"chapter": "{stem}"}}, profiles.load(profile))
print(saved.name)
'''


def _chapters(folder: Path, stems: list[str]) -> list[Path]:
    folder.mkdir(parents=True)
    for stem in stems:
        (folder / f"{stem}.py").write_text(CHAPTER.format(stem=stem))
    return [folder / f"{stem}.py" for stem in stems]


def _snapshot() -> dict[str, str]:
    """Every file under the checkout's notebooks/ and results/ (ignored ones too), with its content's hash."""
    return {str(p.relative_to(REPO)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("notebooks", "results") for p in sorted((REPO / top).rglob("*")) if p.is_file()}


def _changed(before: dict[str, str]) -> list[str]:
    after = _snapshot()
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _git_status() -> str:
    return subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A workspace of this test's own under the checkout's work/ (so git's view of it is the real one), with
    set-up replaced and SERVELAB_RESULTS unset (./test.sh sets it); removed afterwards."""
    made = not (REPO / "work").exists()
    root = REPO / "work" / f"test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(workspace, "WORKSPACE", root)
    monkeypatch.setattr(provision, "setup", lambda name, hub_models=(): None)  # builds engine venvs otherwise
    monkeypatch.delenv("SERVELAB_RESULTS", raising=False)
    yield root
    shutil.rmtree(root, ignore_errors=True)
    if made:
        shutil.rmtree(REPO / "work", ignore_errors=True)


def _check_outputs(root: Path, stems: list[str]) -> None:
    for stem in stems:
        nb = nbformat.read(root / "notebooks" / f"{stem}.ipynb", as_version=4)
        meta = nb.metadata["servelab"]
        assert meta["profile"] == "cpu" and meta["saves"] == [f"results/cpu/{stem}_numbers.json",
                                                              f"results/cpu/{stem}_numbers.meta.json"]
        printed = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert f"{stem}_numbers.json\n" in printed
        stamped = json.loads((root / "results" / "cpu" / f"{stem}_numbers.meta.json").read_text())
        assert stamped["execution_key"] == meta["key"] and stamped["chapter"] == stem
        for lang in TRANSLATED:
            translated = nbformat.read(root / "notebooks" / lang / f"{stem}.ipynb", as_version=4)
            assert translated.metadata["servelab"]["language"] == lang
    for name in workspace.LINKED:
        assert (root / name).is_symlink() and (root / name).resolve() == (REPO / name).resolve(), name
    assert (root / "_build" / "html" / "index.html").is_file()


def test_the_lab_writes_into_the_workspace_and_leaves_the_checkout_as_it_was(lab, tmp_path, monkeypatch):
    stems = ["00_first", "01_second"]
    monkeypatch.setattr(chapters, "sources", lambda names=None: _chapters(tmp_path / "src", stems)
                        if not (tmp_path / "src").exists() else [tmp_path / "src" / f"{s}.py" for s in stems])
    built = []

    def sphinx(builder: str, out: Path, doctrees: Path, language: str, source: Path = REPO) -> None:
        """Stands in for Sphinx (the real build: the `book` test below): what it was given, and what was there."""
        built.append((builder, language, source, sorted(p.name for p in (source / "notebooks").glob("*.ipynb"))))
        out.mkdir(parents=True)
        (out / "index.html").write_text(language)

    monkeypatch.setattr(sphinx_run, "run", sphinx)
    before, status = _snapshot(), _git_status()
    assert cli.main(["lab", "--profile", "cpu", "--lang", "en"]) == 0
    assert _changed(before) == [], "the committed notebooks and results/ are untouched"
    assert _git_status() == status, "git sees nothing new"
    assert built == [("html", "en", lab, ["00_first.ipynb", "01_second.ipynb"])], "the workspace's book, its run"
    _check_outputs(lab, stems)
    assert not (REPO / "results" / "cpu" / "00_first_numbers.json").exists()


@pytest.mark.book
def test_the_workspace_book_builds_from_the_workspace_notebooks(lab, tmp_path, monkeypatch):
    """The same path with the real Sphinx build, in English: stand-ins under the real chapters' names, so the
    checkout's _toc.yml and pages resolve against the workspace's notebooks."""
    stems = [s.stem for s in chapters.sources()]
    sources = _chapters(tmp_path / "src", stems)
    monkeypatch.setattr(chapters, "sources", lambda names=None: sources)
    before, status = _snapshot(), _git_status()
    assert cli.main(["lab", "--profile", "cpu", "--lang", "en"]) == 0
    assert _changed(before) == [] and _git_status() == status
    _check_outputs(lab, stems)
    page = (lab / "_build" / "html" / "en" / "notebooks" / f"{stems[0]}.html").read_text()
    assert f"Stand-in chapter {stems[0]}" in page, "the book shows the workspace's run, not the committed one"
    assert (lab / "_build" / "html" / "en" / "book" / "running.html").is_file()


def test_a_results_folder_the_participant_named_is_kept(lab, tmp_path, monkeypatch):
    """SERVELAB_RESULTS, when set (relative to where ./lab.sh was started), still says where results go."""
    sources = _chapters(tmp_path / "src", ["00_first"])
    monkeypatch.setattr(chapters, "sources", lambda names=None: sources)
    monkeypatch.setattr(sphinx_run, "run", lambda builder, out, *a, **k: out.mkdir(parents=True))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVELAB_RESULTS", "mine")
    assert cli.main(["lab", "--profile", "cpu", "--lang", "en"]) == 0
    assert (tmp_path / "mine" / "cpu" / "00_first_numbers.json").is_file() and not (lab / "results").exists()
    assert os.environ["SERVELAB_RESULTS"] == "mine"


def test_in_place_regenerates_the_committed_notebooks_as_maintainers_do(monkeypatch):
    calls = []
    monkeypatch.setattr(provision, "setup", lambda name, hub_models=(): calls.append(("setup", name)))
    monkeypatch.setattr(chapters, "run_notebooks", lambda profile, *a, **k: calls.append(("run", profile, k)))
    monkeypatch.setattr(chapters, "build_book", lambda *a, **k: calls.append(("book", a, k)) or REPO / "_build")
    monkeypatch.setattr(workspace.translated_notebooks, "write", lambda lang, *a, **k: calls.append(("tr", a, k)))
    assert cli.main(["lab", "--profile", "cpu", "--in-place", "--lang", "ja"]) == 0
    assert calls == [("setup", "cpu"), ("run", "cpu", {}), ("book", (), {"languages": ("ja",)})] + [
        ("tr", (), {})] * len(TRANSLATED), "no workspace: notebooks/, results/ and _build/ of the checkout"


def test_the_workspace_is_ignored_by_git():
    out = subprocess.run(["git", "-C", str(REPO), "check-ignore", "work/notebooks/00_x.ipynb", "work/results/cpu/a.csv",
                          "work/_build/html/index.html"], capture_output=True, text=True)
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 3


def test_something_in_the_way_of_a_link_is_named(tmp_path):
    (tmp_path / "book").mkdir(parents=True)
    with pytest.raises(ValueError, match=f"^{tmp_path / 'book'} is in the way of the workspace's link to "):
        workspace.stage(workspace.Workspace(tmp_path))


@pytest.mark.parametrize(("args", "line"), [
    (["lab", "--frobnicate"], "unknown argument(s) for lab: --frobnicate; accepted: --profile, --lang, --in-place"),
    (["lab", "--profile", "tpu"], "unknown profile 'tpu'; valid profiles: auto, cpu, gpu-24g, gpu-80g"),
    (["lab", "--lang", "fr"], "unknown language(s) fr; accepted: en, ja, ko, de, es"),
    (["lab", "--profile"], "argument --profile: expected one argument"),
])
def test_bad_lab_input_is_one_line_naming_the_value_and_what_is_accepted(args, line, tmp_path):
    out = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"servelab: error: {line}"] and out.stdout == ""
