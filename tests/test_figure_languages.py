"""Figures in the reader's language without running an engine: executing a chapter (a tiny one here, run by papermill
in the kernel venv) draws each figure it shows once more in every translated language (servelab.book.figure_languages),
keeps the renders beside the notebook, and the translated book pages and notebooks show them
(servelab.book.figure_outputs); the English notebook and book are as before."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import nbformat
import pytest
from matplotlib import pyplot as plt

from servelab.book import chapters, figure_languages, figure_outputs, i18n, sphinx_run, translated_notebooks

CHAPTER = '''# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tiny chapter

# %% tags=["parameters"]
profile = "auto"

# %%
from IPython.display import display
from matplotlib import pyplot as plt

from servelab.book import banner, plots

prof = banner.start(profile)

# %%
ax = plots.axes("Time to first token", "prompt tokens", "ms")
for engine in ("vLLM", "SGLang"):
    ax.plot([1, 2, 3], [3, 1, 2], label=f"{engine}: {plots.label('time to first token')}")
ax.legend()
plt.show()

# %%
fig, ax = plt.subplots()
ax.bar([plots.label("prefill"), plots.label("decode")], [1, 2])
display(fig)
plt.close(fig)

# %%
fig, ax = plt.subplots()
ax.set_title("vLLM 0.11")
plt.show()
'''


def _pngs(nb: nbformat.NotebookNode) -> list[tuple[int | None, bytes]]:
    """(figure number, PNG bytes) of each PNG output, in order."""
    return [(o.get("metadata", {}).get("image/png", {}).get(figure_languages.KEY),
             base64.b64decode(o.data["image/png"]))
            for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chapter executed as `servelab notebooks` executes a chapter, in `<root>/notebooks/`."""
    root = tmp_path_factory.mktemp("figures")
    (root / "notebooks").mkdir()
    source = root / "notebooks" / "99_tiny.py"
    source.write_text(CHAPTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SERVELAB_LANG", raising=False)
        return chapters.execute(source, parameters={"profile": "cpu"})


def test_each_figure_is_drawn_in_the_other_languages_and_kept_beside_the_notebook(executed):
    english = _pngs(nbformat.read(executed, as_version=4))
    assert [n for n, _ in english] == [1, 2, 3], "every figure shown, whichever way, is numbered"
    figures = figure_outputs.folder(executed)
    for number, png in english[:2]:
        for lang in ("ja", "de"):
            render = figures / f"{number}.{lang}.png"
            assert render.is_file() and render.read_bytes() != png, render.name
    assert not list(figures.glob("3.*.png")), "a figure no catalog changes keeps its English PNG only"
    text = "".join(o.get("text", "") for c in nbformat.read(executed, as_version=4).cells
                   if c.cell_type == "code" for o in c.outputs)
    assert "Warning" not in text, "rendering writes nothing into the English notebook"


def test_a_relabelled_figure_is_restored(tmp_path):
    i18n.t("time to first token")
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label="vLLM: time to first token")
    ax.bar(["prefill", "decode"], [1, 2])
    ax.set_title("Time to first token")
    legend = ax.legend()
    with figure_languages.relabelled(fig, "de", {"time to first token", "prefill"}) as changed:
        assert changed >= 3
        assert ax.get_title() == i18n.in_language("Time to first token", "de")
        assert legend.get_texts()[0].get_text() == f"vLLM: {i18n.in_language('time to first token', 'de')}"
        assert ax.xaxis.major.formatter.format_ticks([0, 1])[0] == i18n.in_language("prefill", "de")
    assert ax.get_title() == "Time to first token" and legend.get_texts()[0].get_text() == "vLLM: time to first token"
    assert ax.xaxis.major.formatter.format_ticks([0, 1]) == ["prefill", "decode"]
    plt.close(fig)


def test_composite_labels_translate_their_known_parts_on_word_boundaries():
    de = i18n.in_language("decode", "de")
    assert de and de != "decode"
    assert figure_languages.relabel("vLLM decode", "de", {"decode"}) == f"vLLM {de}"
    assert figure_languages.relabel("decoded", "de", {"decode"}) == "decoded", "not inside a word"
    assert figure_languages.relabel("vLLM decode", "en", {"decode"}) == "vLLM decode"
    assert figure_languages.relabel("decode", "de", set()) == de, "a whole message needs no registry"


def test_the_translated_notebook_carries_the_outputs_with_its_figures(executed, monkeypatch):
    source = executed.with_suffix(".py")
    monkeypatch.setattr(chapters, "sources", lambda names=None: [source])
    [written] = translated_notebooks.write("ja", out=executed.parent)
    translated = nbformat.read(written, as_version=4)
    english = _pngs(nbformat.read(executed, as_version=4))
    ours = _pngs(translated)
    figures = figure_outputs.folder(executed)
    assert ours[0][1] == (figures / "1.ja.png").read_bytes() and ours[1][1] == (figures / "2.ja.png").read_bytes()
    assert ours[2] == english[2], "no render: the English figure"
    assert translated.cells[1].source == 'profile = "auto"', "the source's parameters, not the run's"


def test_a_translated_notebook_of_a_changed_chapter_carries_no_outputs(executed, tmp_path, monkeypatch):
    source = tmp_path / executed.with_suffix(".py").name
    source.write_text(CHAPTER.replace("[1, 2, 3]", "[1, 2, 4]"))
    (tmp_path / executed.name).write_bytes(executed.read_bytes())
    monkeypatch.setattr(chapters, "sources", lambda names=None: [source])
    [written] = translated_notebooks.write("de", out=tmp_path)
    assert all(not c.outputs for c in nbformat.read(written, as_version=4).cells if c.cell_type == "code")


TOC = "format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/99_tiny\n"
CONFIG = """title: tiny
only_build_toc_files: true
exclude_patterns: ["notebooks/*.py", "notebooks/*/**", "_build/**"]
execute:
  execute_notebooks: "off"
sphinx:
  extra_extensions: [servelab.book.figure_outputs]
"""


def _page_pngs(html: Path) -> list[bytes]:
    page = (html / "notebooks" / "99_tiny.html").read_text(encoding="utf-8")
    sources = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    return [(html / "notebooks" / src).resolve().read_bytes() for src in sources]


@pytest.mark.book
def test_the_translated_book_shows_the_figures_in_its_language_and_the_english_book_as_before(executed):
    root = executed.parent.parent
    (root / "_config.yml").write_text(CONFIG)
    (root / "_toc.yml").write_text(TOC)
    (root / "intro.md").write_text("# Tiny book\n")
    figures = figure_outputs.folder(executed)
    english = [png for _, png in _pngs(nbformat.read(executed, as_version=4))]
    for lang, expected in (("en", english), ("ja", [(figures / "1.ja.png").read_bytes(),
                                                    (figures / "2.ja.png").read_bytes(), english[2]])):
        html = root / "_build" / "html" / lang
        sphinx_run.run("html", html, root / "_build" / "doctrees" / lang, lang, source=root)
        assert _page_pngs(html) == expected, lang
