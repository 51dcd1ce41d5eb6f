"""Execution keys: what a chapter depends on, what changes its key, and which chapters a run re-executes."""

from __future__ import annotations

import json

import nbformat

from servelab import cli
from servelab.book import chapters, execution_key
from servelab.machine.paths import REPO

NOTEBOOKS = {s.stem: s for s in chapters.sources()}


def _closure(chapter: str) -> set[str]:
    return {str(p.relative_to(REPO)) for p in execution_key.closure(NOTEBOOKS[chapter])}


def test_a_chapter_depends_on_what_it_imports_transitively_and_the_files_they_name():
    found = _closure("07_choosing_and_deploying")
    assert {"notebooks/07_choosing_and_deploying.py", "servelab/__init__.py", "servelab/book/__init__.py",
            "servelab/engines/engine_side/vllm_memory_defaults.py",  # an f-string in measure/deploying/recipes.py
            "servelab/engines/sgl_kernel_stand_in/sgl_kernel/__init__.py",  # put on SGLang's path by launch.py
            "servelab/data/pins/vllm-cpu.txt", "servelab/data/locks/sglang-cpu.txt",
            "servelab/data/locks/kernel.txt"} <= found
    guide = _closure("08_selection_guide")
    assert {"servelab/book/selection_guide.py",  # imported by the chapter
            "servelab/book/claims.py",  # imported by selection_guide
            "servelab/data/claims.toml",  # named by claims.py
            "servelab/data/locks/kernel.txt"} <= guide
    assert "servelab/book/selection_guide.py" not in found  # chapter 07 no longer builds the guide


def test_an_engine_side_script_brings_the_sibling_it_imports():
    found = _closure("00_setup_check")
    assert {"servelab/engines/engine_side/check_vllm_args.py", "servelab/engines/engine_side/engine_report.py"} <= found


def test_an_f_string_names_a_script_only_when_it_spells_one(tmp_path):
    source = tmp_path / "07_x.py"
    source.write_text('share = f"{0.5:.0%}"\nname = f"{1:032x}"\n')  # placeholders alone: no file named
    found = {p.name for p in execution_key.closure(source)}
    assert not found & {p.name for p in execution_key._named_files()}
    source.write_text('name = f"{engine}_memory_defaults.py"\n')
    assert {"vllm_memory_defaults.py", "sglang_memory_defaults.py"} <= {p.name for p in execution_key.closure(source)}


def test_a_figure_s_embedded_script_and_style_are_inputs_of_a_chapter_that_draws_it(tmp_path):
    source = tmp_path / "08_x.py"
    source.write_text("from servelab.book import kv_event_figure\n")
    found = {str(p.relative_to(REPO)) for p in execution_key.closure(source) if p.is_relative_to(REPO)}
    assert {"servelab/book/kv_event_figure.js", "servelab/book/kv_event_figure.css",
            "servelab/book/kv_event_frame.py"} <= found
    assert not {p for p in _closure("02_kv_cache_memory") if p.endswith((".js", ".css"))}


def test_a_chapter_does_not_depend_on_what_it_never_reaches():
    found = _closure("02_kv_cache_memory")
    assert "servelab/data/claims.toml" not in found and "servelab/book/claims.py" not in found
    assert not [p for p in found if p.startswith(("tests/", "locales/", "book/"))]


def test_the_key_changes_with_any_input_a_read_or_the_profile():
    files, reads = {"a.py": "1", "b.toml": "2"}, {"results/cpu/x.csv": "3"}
    k = execution_key.key(files, reads, "cpu")
    assert k == execution_key.key(dict(reversed(files.items())), reads, "cpu")
    assert len({k, execution_key.key({**files, "a.py": "9"}, reads, "cpu"),
                execution_key.key(files, {"results/cpu/x.csv": "9"}, "cpu"),
                execution_key.key(files, reads, "gpu-24g"), execution_key.key(files, {}, "cpu")}) == 5


def _notebook(path, meta=None):
    nb = nbformat.v4.new_notebook()
    if meta is not None:
        nb.metadata[execution_key.METADATA] = meta
    nbformat.write(nb, path)


def test_status_names_what_changed(tmp_path, monkeypatch):
    source = tmp_path / "07_x.py"
    monkeypatch.setattr(execution_key, "inputs", lambda s: {"servelab/x.py": "new", "servelab/y.py": "same"})
    assert execution_key.status(source, "cpu").why == "no execution key recorded"
    old = {"servelab/x.py": "old", "servelab/y.py": "same", "servelab/gone.py": "1"}
    _notebook(source.with_suffix(".ipynb"), {"key": "k", "profile": "cpu", "inputs": old, "reads": {}})
    st = execution_key.status(source, "cpu")
    assert not st.current and st.why == "servelab/gone.py removed; servelab/x.py changed"
    _notebook(source.with_suffix(".ipynb"), {"key": st.key, "profile": "cpu", "inputs": {}, "reads": {}})
    assert execution_key.status(source, "cpu").current
    assert execution_key.status(source, "gpu-24g").why == "executed on profile cpu, not gpu-24g"


def test_plan_re_executes_the_readers_of_a_re_executed_chapter(tmp_path, monkeypatch):
    a, b, c = (tmp_path / f"0{i}_{n}.py" for i, n in enumerate("abc"))
    _notebook(a.with_suffix(".ipynb"), {"saves": ["results/cpu/a.csv"], "reads": {}})
    _notebook(b.with_suffix(".ipynb"), {"saves": ["results/cpu/b.csv"], "reads": {"results/cpu/a.csv": "1"}})
    _notebook(c.with_suffix(".ipynb"), {"saves": [], "reads": {"results/cpu/b.csv": "1"}})
    stale = {"00_a": "servelab/measure/a.py changed"}
    monkeypatch.setattr(execution_key, "status",
                        lambda s, p, meta: execution_key.Status(s.stem, "k", stale.get(s.stem, "")))
    whys = [st.why for st in execution_key.plan([a, b, c], "cpu")]
    assert whys == ["servelab/measure/a.py changed", "reads results of 00_a, re-executed",
                    "reads results of 01_b, re-executed"]
    stale.clear()
    assert all(st.current for st in execution_key.plan([a, b, c], "cpu"))
    assert [st.why for st in execution_key.plan([a, b, c], "cpu", everything=True)] == ["--all"] * 3


def test_execute_records_the_key_the_reads_and_the_saves(tmp_path, monkeypatch):
    """A real papermill run: the notebook and the result it saved carry the key; a read of another result is kept."""
    monkeypatch.setenv("SERVELAB_RESULTS", str(tmp_path / "results"))
    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "results" / "cpu" / "other.csv").write_text("x\n1\n")
    source = tmp_path / "07_tiny.py"
    source.write_text(
        "# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n"
        "#     name: python3\n# ---\n\n"
        '# %% tags=["parameters"]\nprofile = "auto"\n\n# %%\nfrom pathlib import Path\n'
        "from servelab.book import results\nfrom servelab.machine import profiles\nprof = profiles.load(profile)\n"
        "import os\nresults.note_read(Path(os.environ['SERVELAB_RESULTS']) / 'cpu' / 'other.csv')\n"
        "results.save('tiny', {'n': 1}, prof)\n")
    out = chapters.execute(source, parameters={"profile": "cpu"})
    meta = nbformat.read(out, as_version=4).metadata[execution_key.METADATA]
    assert meta["profile"] == "cpu" and meta["parameters"] == {"profile": "cpu"}
    assert meta["saves"] == ["results/cpu/tiny.json", "results/cpu/tiny.meta.json"]
    assert list(meta["reads"]) == ["results/cpu/other.csv"]
    assert "servelab/book/results.py" in meta["inputs"] and str(source) in meta["inputs"]
    saved = json.loads((tmp_path / "results" / "cpu" / "tiny.meta.json").read_text())
    assert saved["execution_key"] == meta["key"] and saved["chapter"] == "07_tiny"


def test_keys_command_prints_each_chapter_and_writes_the_stale_ones(tmp_path, capsys):
    out = tmp_path / "stale.txt"
    assert cli.main(["keys", "--all", "--write", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[chapters] {name}: re-executed (--all)" for name in NOTEBOOKS]
    assert out.read_text().splitlines() == [f"notebooks/{name}.ipynb" for name in NOTEBOOKS]


def test_keys_command_with_an_unknown_profile_is_one_line(capsys):
    assert cli.main(["keys", "--profile", "tpu"]) == 2
    assert "unknown profile 'tpu'" in capsys.readouterr().err


def test_a_module_fingerprint_ignores_comments_docstrings_and_blank_lines_not_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Doc."""\n\nX = 1  # one\n\n\ndef f():\n    """Doc."""\n    return """a\n\nb"""\n')
    before = execution_key.fingerprint(module)
    module.write_text('"""Other words."""\nX = 1\n# a new comment\n\ndef f():\n    """More."""\n'
                      '    return """a\n\nb"""  # why\n')
    assert execution_key.fingerprint(module) == before
    for changed in ('X = 2\ndef f():\n    return """a\n\nb"""\n', 'X = 1\ndef f():\n    return """a\nb"""\n'):
        module.write_text(changed)  # a value, and a blank line inside a string, are code
        assert execution_key.fingerprint(module) != before
    data = tmp_path / "d.toml"
    data.write_text("# comment\nx = 1\n")
    assert execution_key.fingerprint(data) == execution_key.digest(data)  # a data file counts whole


def _chapter(path, prose, code, tags=""):
    path.write_text(f"# %% [markdown]\n# {prose}\n\n# %%{tags}\n{code}\n")
    return path


def test_a_chapter_fingerprint_is_its_code_cells_and_their_tags_not_its_prose(tmp_path):
    source = _chapter(tmp_path / "07_x.py", "First words.", "x = 1")
    before = execution_key.fingerprint(source, chapter=True)
    assert execution_key.fingerprint(_chapter(source, "Other words, more of them.", "x = 1"), chapter=True) == before
    assert execution_key.fingerprint(_chapter(source, "First words.", "x = 2"), chapter=True) != before
    assert execution_key.fingerprint(_chapter(source, "First words.", "x = 1  # a comment a reader sees"),
                                     chapter=True) != before  # the committed notebook shows the cell's text
    assert execution_key.fingerprint(_chapter(source, "First words.", "x = 1", ' tags=["hide-input"]'),
                                     chapter=True) != before


def test_the_committed_notebooks_record_the_fingerprints_of_their_inputs():
    """What the keys were computed from is what `fingerprint` gives now, for every current chapter."""
    for source in NOTEBOOKS.values():
        meta = execution_key.recorded(source.with_suffix(".ipynb"))
        if execution_key.status(source, "cpu", meta).current:
            assert meta["inputs"] == execution_key.inputs(source)
