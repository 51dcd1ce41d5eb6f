"""The scrubbable KV event figure: its HTML (checked as text, and run in headless Chromium) and its still PNG twin."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
import pytest
from matplotlib import pyplot as plt

from servelab.book import i18n, kv_event_figure, kv_event_frame
from tests.kv_event_trace import synthetic_trace

matplotlib.use("Agg")  # tests only; notebooks keep their inline backend

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL = "install it with `apt-get install -y --no-install-recommends chromium` (Debian; ./test.sh does so as root)"


class _Page(HTMLParser):
    """Every tag with its attributes, and the text of each <script> element."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _embedded(html: str) -> dict:
    (data,) = [text for attrs, text in _parse(html).scripts if attrs.get("type") == "application/json"]
    return json.loads(data)


# --- the HTML, without a browser ------------------------------------------------------------------------------

def test_the_html_embeds_the_checked_trace_and_its_script_and_fetches_nothing():
    trace = synthetic_trace(3)
    html = kv_event_figure.scrubber_html(trace, title="A trace")
    page = _parse(html)
    assert _embedded(html) == {"steps": kv_event_figure.trace_steps(trace), "labels": kv_event_figure.default_labels()}
    code = [text for attrs, text in page.scripts if "type" not in attrs]
    assert len(code) == 1 and "function servelabKvFigure(root)" in code[0]
    assert not [a for _, attrs in page.tags for a in ("src", "href") if a in attrs], "nothing may be fetched"
    assert "@import" not in html and "fetch(" not in html and not re.findall(r"url\((?![\"']?#)", html)  # url(#marker)
    assert set(re.findall(r"https?://[^\s\"')]+", html)) <= {"http://www.w3.org/2000/svg"}  # a namespace, not a fetch
    root = page.tags[0][1]
    assert page.tags[0][0] == "div" and "mathjax_ignore" in root["class"]
    assert root["data-frames"] == str(len(trace["steps"]))
    assert [a.get("max") for t, a in page.tags if a.get("data-role") == "slider"] == [str(len(trace["steps"]) - 1)]
    assert {"prev", "next", "play", "vllm-svg", "sglang-svg", "vllm-events", "sglang-events", "caption"} <= {
        a.get("data-role") for _, a in page.tags}


def test_two_figures_on_one_page_share_no_id():
    trace = synthetic_trace(2)
    page = kv_event_figure.scrubber_html(trace) + kv_event_figure.scrubber_html(trace)
    ids = [a["id"] for _, a in _parse(page).tags if "id" in a]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert "getElementById(\"" + ids[1] + "\")" in page  # each script draws into its own figure
    assert kv_event_figure.scrubber_html(trace, figure_id="fig-a").count('id="fig-a"') == 1


def test_text_from_the_data_cannot_end_the_script_element():
    trace = synthetic_trace(1)
    trace["steps"][1]["vllm"]["events"].append("</script><script>alert(1)</script> & <!--")
    html = kv_event_figure.scrubber_html(trace, title="<b>t</b>")
    assert "alert(1)</script>" not in html and "<b>t</b>" not in html
    assert _embedded(html)["steps"][1]["vllm"]["events"][-1] == "</script><script>alert(1)</script> & <!--"


def test_every_visible_word_comes_from_the_labels(monkeypatch):
    trace = synthetic_trace(1)
    mine = {"previous": "ZURÜCK-X", "vllm": "POOL-Y", "phase_start": "LEER-Z"}
    html = kv_event_figure.scrubber_html(trace, labels=mine)
    assert all(word in html for word in mine.values())
    assert _embedded(html)["labels"] == {**kv_event_figure.default_labels(), **mine}
    script, words = kv_event_figure.SCRIPT.read_text(), kv_event_figure.default_labels()
    written = re.sub(r'<script type="application/json".*?</script>', "", kv_event_figure.scrubber_html(trace))
    for key in kv_event_figure.LABELS:  # each label is drawn: by the script, or in the HTML written around it
        assert f"L.{key}" in script or f'"{key}"' in script or words[key] in written, key
    with pytest.raises(ValueError, match="unknown label keys prev"):
        kv_event_figure.scrubber_html(trace, labels={"prev": "x"})
    monkeypatch.setenv("SERVELAB_LANG", "de")
    german = kv_event_figure.default_labels()
    assert german == {k: i18n.t(v) for k, v in kv_event_figure.LABELS.items()}
    assert german["previous"] != "previous" and german["previous"] in kv_event_figure.scrubber_html(trace)


def test_the_caption_is_built_from_the_phase_in_the_reader_s_words():
    words = {**kv_event_figure.default_labels(), "phase_admitted": "Anfrage {request} angenommen"}
    step = {"phase": "admitted", "request": 3, "caption": "request 3 admitted"}
    assert kv_event_figure.caption(step, words) == "Anfrage 3 angenommen"
    assert kv_event_figure.caption({**step, "phase": "replayed"}, words) == "request 3 admitted"
    assert kv_event_figure.caption({"phase": "start", "request": None, "caption": ""}, words) == "empty caches"


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.update(steps=[]), "non-empty list of steps"),
    (lambda t: t["steps"][1]["vllm"]["blocks"][0].update(state="hot"), r"steps\[1\].vllm.blocks\[0\].state"),
    (lambda t: t["steps"][1]["sglang"]["nodes"][1].update(parent="0"), r"steps\[1\].sglang.nodes\[1\].parent"),
    (lambda t: t["steps"][0]["vllm"]["blocks"].append({"id": 0, "state": "free"}), "ids repeat"),
    (lambda t: t["steps"][0].pop("sglang"), r"steps\[0\] must be a mapping"),
    (lambda t: t["steps"][2]["sglang"].update(events="stored"), r"steps\[2\].sglang.events"),
])
def test_a_malformed_trace_is_refused_naming_the_field(mutate, message):
    trace = synthetic_trace(1)
    mutate(trace)
    with pytest.raises(ValueError, match=message):
        kv_event_figure.trace_steps(trace)


def test_a_notebook_cell_shows_html_and_carries_the_last_step_as_png():
    trace = synthetic_trace(2)
    shown = kv_event_figure.scrubber(trace, title="t")._repr_mimebundle_()
    assert shown["text/html"].startswith('<div class="slkv ')
    assert shown["image/png"][:8] == b"\x89PNG\r\n\x1a\n" and shown["text/plain"] == "<KV event scrubber: 5 steps>"
    with pytest.raises(ValueError):
        kv_event_figure.scrubber({"steps": [{}]})


# --- the still picture ----------------------------------------------------------------------------------------

def test_last_frame_png_writes_a_picture_of_the_last_step(tmp_path):
    path = kv_event_figure.last_frame_png(synthetic_trace(4), tmp_path / "last.png")
    assert path == tmp_path / "last.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = plt.imread(path).shape
    assert 700 < width < 2000 and 300 < height < width


def test_last_frame_draws_every_block_and_node_in_its_state():
    trace = synthetic_trace(5)
    last = kv_event_figure.trace_steps(trace)[-1]
    _, ax = plt.subplots()
    assert kv_event_figure.last_frame_png(trace, ax, labels={"root": "WURZEL"}) is ax
    blocks = [p for p in ax.patches if p.get_gid() == kv_event_frame.BLOCK_GID]
    nodes = [p for p in ax.patches if p.get_gid() == kv_event_frame.NODE_GID]
    assert len(blocks) == len(last["vllm"]["blocks"]) and len(nodes) == len(last["sglang"]["nodes"])
    faces = [matplotlib.colors.to_hex(b.get_facecolor()) for b in blocks]
    for state in kv_event_figure.BLOCK_STATES:
        assert faces.count(kv_event_frame.FACE[state]) == sum(b["state"] == state for b in last["vllm"]["blocks"])
    texts = {t.get_text() for t in ax.texts}
    assert {b["hash"] for b in last["vllm"]["blocks"] if b["hash"]} <= texts
    assert {"WURZEL", "request 4 finished", kv_event_figure.default_labels()["sglang"]} <= texts
    chains = [p for p in ax.patches if isinstance(p, matplotlib.patches.FancyArrowPatch)]
    hashes = {b["hash"] for b in last["vllm"]["blocks"] if b["hash"]}
    assert len(chains) == sum(1 for b in last["vllm"]["blocks"] if b["parent"] in hashes)
    plt.close("all")


def test_the_tree_hangs_parentless_nodes_from_a_root_and_centres_parents():
    nodes = [{"id": 1, "parent": None, "label": "a", "tokens": 4, "state": "cached"},
             {"id": 2, "parent": 1, "label": "b", "tokens": 2, "state": "locked"},
             {"id": 3, "parent": 1, "label": "c", "tokens": 2, "state": "evicted"},
             {"id": 4, "parent": None, "label": "d", "tokens": 3, "state": "cached"}]
    pos, root = kv_event_frame.tree_layout(nodes)
    assert root == "root" and pos[root][0] == 0 and pos[1][0] == 1 and pos[2][0] == 2
    assert pos[1][1] == (pos[2][1] + pos[3][1]) / 2 and pos[4][1] == 2
    _, ax = plt.subplots()
    step = {"vllm": {"blocks": [], "events": []}, "sglang": {"nodes": nodes, "events": []}}
    kv_event_frame.draw_on(ax, step, "", kv_event_figure.default_labels())
    assert len([p for p in ax.patches if p.get_gid() == kv_event_frame.NODE_GID]) == 5  # the drawn root too
    plt.close("all")


# --- in a browser ----------------------------------------------------------------------------------------------

PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { __errors.push(String(e.message || e.type) + " " + (e.filename || "")
  + ":" + (e.lineno || "")); }, true);
window.addEventListener("unhandledrejection", function (e) { __errors.push("unhandled: " + e.reason); });
var consoleError = console.error;
console.error = function () {
  __errors.push("console.error: " + [].join.call(arguments, " "));
  consoleError.apply(console, arguments);
};
</script>"""

DRIVE = """<script>
function count(svg, state) { return svg.querySelectorAll('[data-state="' + state + '"]').length; }
function texts(list) {
  return [].map.call(list.querySelectorAll("li.slkv-event"), function (li) { return li.textContent; });
}
var out = {figures: []}, pending = 0;
document.querySelectorAll(".slkv").forEach(function (fig) {
  function part(role) { return fig.querySelector('[data-role="' + role + '"]'); }
  var slider = part("slider"), r = {id: fig.id, frames: Number(fig.getAttribute("data-frames")),
    slider_max: Number(slider.max), nojs_hidden: part("nojs").hidden, steps: []};
  for (var k = 0; k <= Number(slider.max); k++) {
    slider.value = k;
    slider.dispatchEvent(new Event("input"));
    var pool = part("vllm-svg"), tree = part("sglang-svg");
    r.steps.push({step: Number(fig.getAttribute("data-step")), caption: part("caption").textContent,
      counter: part("counter").textContent, free: count(pool, "free"), used: count(pool, "used"),
      cached: count(pool, "cached"), chains: pool.querySelectorAll(".slkv-chain").length,
      hashes: [].map.call(pool.querySelectorAll(".slkv-hash"), function (t) { return t.textContent; }),
      nodes: {cached: count(tree, "cached"), locked: count(tree, "locked"), evicted: count(tree, "evicted"),
              root: count(tree, "root")},
      vllm_events: texts(part("vllm-events")), sglang_events: texts(part("sglang-events"))});
  }
  r.hover = {};  // at the last step: hovering a block outlines it and its ancestors in the hash chain
  part("vllm-svg").querySelectorAll("g.slkv-block").forEach(function (g) {
    g.dispatchEvent(new Event("mouseenter"));
    r.hover[g.getAttribute("data-id")] = part("vllm-svg").querySelectorAll("g.slkv-hl").length;
    g.dispatchEvent(new Event("mouseleave"));
  });
  r.after_leave = fig.querySelectorAll(".slkv-hl").length;
  slider.value = 0; slider.dispatchEvent(new Event("input"));
  part("next").click(); part("next").click(); part("prev").click();
  r.after_next_next_prev = Number(fig.getAttribute("data-step"));
  slider.value = 0; slider.dispatchEvent(new Event("input"));
  part("play").click();
  r.playing_label = part("play").textContent;
  pending++;
  setTimeout(function () {  // 3 ticks of 1.1 s
    r.after_3_3_s = Number(fig.getAttribute("data-step"));
    part("play").click();  // pause
    setTimeout(function () {
      r.after_pause = Number(fig.getAttribute("data-step"));
      part("play").click();  // play on to the end, where it stops by itself
      setTimeout(function () {
        r.at_the_end = Number(fig.getAttribute("data-step"));
        r.stopped_label = part("play").textContent;
        out.figures.push(r);
        if (--pending === 0) finish();
      }, 1100 * (r.frames + 1));
    }, 3000);
  }, 3350);
});
function finish() {
  out.errors = window.__errors;
  var pre = document.createElement("pre");
  pre.id = "probe-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}
</script>"""


def chromium() -> str:
    """The headless browser: $SERVELAB_CHROMIUM or the first of CHROMIUM on PATH; missing, the test fails."""
    found = os.environ.get("SERVELAB_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM)), None)
    if not found:
        pytest.fail(f"Chromium is missing (none of {', '.join(CHROMIUM)} on PATH): {INSTALL}", pytrace=False)
    return found


def run_page(chromium: str, page: Path, *args: str, budget_ms: int = 0) -> subprocess.CompletedProcess:
    """Open `page` in a fresh headless Chromium that reaches nothing beyond the page; returns the finished process."""
    with tempfile.TemporaryDirectory(prefix="servelab-chromium-") as profile:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}"] + ([f"--virtual-time-budget={budget_ms}"] if budget_ms else [])
        return subprocess.run([chromium, *flags, *args, page.as_uri()], capture_output=True, text=True, timeout=120,
                              check=True)


def _chain_length(block: dict, blocks: list[dict]) -> int:
    """How many blocks the hash chain from `block` up to the first block of its prompt holds, `block` included."""
    by_hash = {b["hash"]: b for b in blocks if b["hash"]}
    return 1 + (_chain_length(by_hash[block["parent"]], blocks) if block["parent"] in by_hash else 0)


@pytest.mark.browser
def test_the_figure_scrubs_through_every_step_in_a_browser(tmp_path):
    browser = chromium()
    traces = [synthetic_trace(5), synthetic_trace(2)]
    figures = "".join(kv_event_figure.scrubber_html(t, title=f"trace {i}") for i, t in enumerate(traces))
    page = tmp_path / "page.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'>{PROBE}</head>"
                    f"<body style='width:700px'>{figures}{DRIVE}</body></html>")
    start = time.monotonic()
    dom = run_page(browser, page, "--dump-dom", budget_ms=60_000).stdout
    took = time.monotonic() - start
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', dom, re.S)
    assert found, f"the page's probe did not finish (in {took:.1f} s); the page's end:\n{dom[-2000:]}"
    result = json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert result["errors"] == []
    shown = {r["id"]: r for r in result["figures"]}
    assert len(shown) == 2
    words = kv_event_figure.default_labels()
    for trace, fig_id in zip(traces, re.findall(r'<div class="slkv[^"]*" id="([^"]+)"', figures), strict=True):
        steps, r = kv_event_figure.trace_steps(trace), shown[fig_id]
        assert r["frames"] == r["slider_max"] + 1 == len(steps) == len(r["steps"]) and r["nojs_hidden"]
        for k, (step, drawn) in enumerate(zip(steps, r["steps"], strict=True)):
            blocks, nodes = step["vllm"]["blocks"], step["sglang"]["nodes"]
            _, root = kv_event_frame.tree_layout(nodes)
            hashes = {b["hash"] for b in blocks if b["hash"]}
            assert drawn["step"] == k and drawn["counter"] == f"step {k + 1} of {len(steps)}"
            assert drawn["caption"] == kv_event_figure.caption(step, words)
            assert {s: drawn[s] for s in ("free", "used", "cached")} == {
                s: sum(b["state"] == s for b in blocks) for s in ("free", "used", "cached")}, f"step {k}"
            assert drawn["hashes"] == [b["hash"] for b in sorted(blocks, key=lambda b: b["id"]) if b["hash"]]
            assert drawn["chains"] == sum(1 for b in blocks if b["parent"] in hashes)
            assert drawn["nodes"] == {"root": 1, **{s: sum(n["state"] == s and n["id"] != root for n in nodes)
                                                    for s in kv_event_figure.NODE_STATES}}, f"step {k}"
            assert drawn["vllm_events"] == step["vllm"]["events"]
            assert drawn["sglang_events"] == step["sglang"]["events"]
        assert len({d["cached"] for d in r["steps"]}) > 1  # the drawing changes with the step
        assert r["hover"] == {str(b["id"]): _chain_length(b, steps[-1]["vllm"]["blocks"])
                              for b in steps[-1]["vllm"]["blocks"]}
        assert max(r["hover"].values()) >= 3 and r["after_leave"] == 0
        assert r["after_next_next_prev"] == 1
        assert r["playing_label"].endswith(words["pause"]) and r["after_3_3_s"] == 3 == r["after_pause"]
        assert r["at_the_end"] == len(steps) - 1 and r["stopped_label"].endswith(words["play"])
