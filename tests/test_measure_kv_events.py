"""The engines' KV cache events (servelab.measure.kv_events): the recorder's decoding, the referee on traces recorded
from the real engines (tests/data/kv_events_*.json) and on corrupted copies of them, the figure's steps, and a live
recording on the session's shared servers (conftest `live`), which publish their events while they serve.

The saved traces were recorded with `python -m tests.test_measure_kv_events ENGINE` (`record_saved_trace`): the
eviction workload for a budget of SAVED_BUDGET tokens (4 usable vLLM blocks), the cpu profile with a max_model_len
that such a budget accepts, from an emptied cache.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.engine_side import script
from servelab.machine import engine_envs
from servelab.measure.kv_events import Recorder, Trace, event_options, eviction_workload, frames, replay
from servelab.measure.kv_events.engine_trace import read
from servelab.measure.kv_events.keys import prefix_keys, short_hash

DATA = Path(__file__).parent / "data"
SAVED_BUDGET, SAVED_MAX_MODEL_LEN = 640, 512
ENGINES = ("vllm", "sglang")


def saved(engine: str) -> Trace:
    return Trace.from_dict(json.loads((DATA / f"kv_events_{engine}.json").read_text())["trace"])


def _recorder_module():
    spec = importlib.util.spec_from_file_location("kv_event_recorder", script("kv_event_recorder.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the recorder --------------------------------------------------------------------------------------------
class _Stored:  # shaped as a msgspec Struct: the recorder reads __struct_fields__
    __struct_fields__ = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "medium")

    def __init__(self, hashes, parent, tokens):
        self.block_hashes, self.parent_block_hash, self.token_ids, self.block_size = hashes, parent, tokens, 2
        self.medium = "GPU"


class BlockStored(_Stored):
    pass


def test_recorder_writes_hashes_as_strings_and_keeps_the_engine_time():
    recorder = _recorder_module()

    class Decoder:
        def decode(self, payload):
            assert payload == b"payload"
            return type("Batch", (), {"ts": 12.5, "events": [BlockStored([b"\x0a\xff", -5], None, (1, 2))]})

    line = recorder.decode(Decoder(), [b"kv", (7).to_bytes(8, "big"), b"payload"], recv=13.0)
    assert line == {"seq": 7, "ts": 12.5, "recv": 13.0, "events": [
        {"type": "BlockStored", "block_hashes": ["0aff", "-5"], "parent_block_hash": None, "token_ids": [1, 2],
         "block_size": 2, "medium": "GPU"}]}
    with pytest.raises(ValueError, match="3 frames"):
        recorder.decode(Decoder(), [b"kv", b"payload"], recv=0.0)


SEND = """
import sys, time, zmq, msgspec
engine, endpoint = sys.argv[1], sys.argv[2]
if engine == "vllm":
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
    h1, h2 = bytes(range(32)), bytes(range(1, 33))
    extra = {"lora_name": None}
else:
    from sglang.srt.disaggregation.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
    h1, h2 = -7, 2**62
    extra = {}
batch = KVEventBatch(ts=123.0, events=[
    BlockStored(block_hashes=[h1, h2], parent_block_hash=None, token_ids=[5, 6, 7, 8], block_size=2, lora_id=None,
                medium="GPU", **extra),
    BlockRemoved(block_hashes=[h2], medium="GPU"), AllBlocksCleared()])
pub = zmq.Context().socket(zmq.PUB)
pub.connect(endpoint)
time.sleep(1.0)  # a PUB drops what it sends before the connection is up
pub.send_multipart((b"kv", (0).to_bytes(8, "big"), msgspec.msgpack.encode(batch)))
time.sleep(0.5)
"""


@pytest.mark.engine_venv
@pytest.mark.parametrize("engine", ENGINES)
def test_recorder_decodes_what_the_engine_schema_encodes(require_engine, cpu, engine, tmp_path):
    """A batch built with the engine's own classes, sent over a connecting PUB socket, comes out as a line."""
    require_engine(engine)
    python = engine_envs.get(cpu.engine_env(engine)).python
    with Recorder(engine, cpu, out=tmp_path / "events.jsonl") as recorder:
        subprocess.run([str(python), "-c", SEND, engine, recorder.endpoint], check=True, timeout=120)
        recorder.wait_quiet()
        messages = recorder.stop()
    assert [m["seq"] for m in messages] == [0] and messages[0]["ts"] == 123.0
    stored, removed, cleared = messages[0]["events"]
    first, second = ((bytes(range(32)).hex(), bytes(range(1, 33)).hex()) if engine == "vllm" else ("-7", str(2**62)))
    assert (stored["type"], stored["block_hashes"], stored["token_ids"]) == ("BlockStored", [first, second],
                                                                             [5, 6, 7, 8])
    assert stored["parent_block_hash"] is None and stored["medium"] == "GPU"
    assert (removed["type"], removed["block_hashes"], cleared["type"]) == ("BlockRemoved", [second],
                                                                           "AllBlocksCleared")


def test_event_options_connect_to_a_loopback_subscriber():
    endpoint = "tcp://127.0.0.1:5999"
    assert event_options("vllm", endpoint) == {"kv_events_config": {
        "publisher": "zmq", "endpoint": endpoint, "topic": "kv", "enable_kv_cache_events": True}}
    assert event_options("sglang", endpoint)["kv_events_config"]["bind"] is False
    for bad in ("tcp://*:5999", "tcp://0.0.0.0:5999", "ipc:///tmp/x"):
        with pytest.raises(ValueError, match="127.0.0.1"):
            event_options("vllm", bad)


def test_short_hashes_read_both_engines_hashes():
    assert short_hash("ab" * 32) == "ababab"
    assert short_hash("-1") == "ffffff" and short_hash("255") == "000000"
    assert prefix_keys([1, 2, 3], 2) == prefix_keys([1, 2], 2)  # a partial tail has no key


# ---- the referee on the saved traces -------------------------------------------------------------------------
# Per request (start window first) in units: vLLM blocks of 128 tokens, SGLang pages of one token.
EXPECTED = {"vllm": {"stored": [0, 2, 0, 1, 2, 1], "removed": [0, 0, 0, 0, 2, 1]},
            "sglang": {"stored": [0, 296, 127, 0, 306, 40], "removed": [0, 0, 0, 0, 167, 0]}}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_referee_agrees_with_the_saved_traces(engine):
    trace = saved(engine)
    assert [tuple(r["tokens"]) for r in trace.requests] == list(eviction_workload(SAVED_BUDGET).prompts)
    verdict = replay(trace)
    assert verdict.agree, (verdict.problems, verdict.table.to_dict("records"))
    table = verdict.table
    assert table.engine_stored.tolist() == table.sim_stored.tolist() == EXPECTED[engine]["stored"]
    assert table.engine_removed.tolist() == table.sim_removed.tolist() == EXPECTED[engine]["removed"]
    assert (table.engine_hit[1:] == table.sim_hit[1:]).all()  # the engine's own cached-token report, too
    assert verdict.differences  # what it cannot compare is said


def _events(trace: Trace, kind: str) -> list[dict]:
    return [e for m in trace.messages for e in m["events"] if e["type"] == kind]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_referee_catches_a_dropped_or_an_extra_removal(engine):
    dropped = saved(engine)
    _events(dropped, "BlockRemoved")[-1]["block_hashes"].pop()
    verdict = replay(dropped)
    assert not verdict.agree and "removed" in " ".join(verdict.table.note)
    extra = saved(engine)
    message = next(m for m in extra.messages if any(e["type"] == "BlockRemoved" for e in m["events"]))
    message["events"].append(copy.deepcopy(_events(extra, "BlockRemoved")[0]))
    verdict = replay(extra)
    assert not verdict.agree and (~verdict.table.match).sum() == 1, verdict.table


@pytest.mark.parametrize("engine", ENGINES)
def test_the_referee_catches_a_lost_message_a_changed_token_and_a_late_event(engine):
    lost = saved(engine)
    del lost.messages[1]
    assert any("gaps" in p for p in replay(lost).problems)
    changed = saved(engine)
    _events(changed, "BlockStored")[-1]["token_ids"][0] += 1
    assert not replay(changed).agree
    late = saved(engine)  # the last request's events stamped as if the request before had them
    late.messages[-1]["ts"] = late.requests[-2]["send"] + 1e-3
    assert not replay(late).agree


def test_frames_follow_the_figure_contract():
    verdicts = {engine: replay(saved(engine)) for engine in ENGINES}
    steps = json.loads(json.dumps(frames(**verdicts)))["steps"]  # JSON-able
    requests = len(saved("vllm").requests)
    assert len(steps) == 1 + 2 * requests
    assert [s["phase"] for s in steps[:3]] == ["start", "admitted", "finished"]
    assert steps[0]["vllm"]["events"] == ["cleared"] and steps[0]["sglang"]["events"] == ["cleared"]
    assert all(b["state"] == "free" for b in steps[0]["vllm"]["blocks"]) and steps[0]["sglang"]["nodes"] == []
    first = steps[1]["vllm"]
    assert [b["state"] for b in first["blocks"]].count("used") == 3  # 296 tokens: two full blocks and a partial
    assert first["events"][0].startswith("stored ") and "128 tokens" in first["events"][0]
    stored = {b["hash"] for b in first["blocks"] if b["hash"]}
    assert stored == {e.split()[1] for e in first["events"]}  # the engine's hashes, on the replayed blocks
    evict = steps[1 + 2 * 3]  # request 3 admitted
    assert evict["caption"] == "request 3 admitted" and any(e.startswith("removed") for e in evict["sglang"]["events"])
    assert {n["state"] for n in evict["sglang"]["nodes"]} >= {"evicted", "cached"}
    assert all(set(n) == {"id", "parent", "label", "tokens", "state"} for s in steps for n in s["sglang"]["nodes"])
    with pytest.raises(ValueError):
        frames(vllm=verdicts["sglang"])


# ---- live, on the session's shared servers -------------------------------------------------------------------
@pytest.mark.server
@pytest.mark.parametrize("engine", ENGINES)
def test_the_shared_servers_events_agree_with_the_replay(live, engine):
    """What the shared server published for the token-id requests it answered after the questions: every stored
    unit is a whole-unit prefix of the prompt sent in its window, and the replay agrees request by request."""
    trace = Trace.from_dict(live[engine]["kv_events"])
    assert trace.messages and trace.messages[0]["seq"] == 0  # subscribed before the engine published anything
    verdict = replay(trace)
    # the shared SGLang server runs without --enable-cache-report, so its hits are unreported (a disagreement for
    # a chapter); here the stores and removals must agree, request by request
    rows = verdict.table
    assert not verdict.problems and (rows.engine_stored == rows.sim_stored).all() and \
        (rows.engine_removed == rows.sim_removed).all(), (verdict.problems, rows.to_dict("records"))
    if engine == "vllm":
        assert verdict.agree, rows.to_dict("records")
    unit = trace.capacity["block_size"]
    side = read(trace)
    for mark in trace.requests:
        stored = side.windows[mark["request"]].stored
        assert set(stored) <= set(prefix_keys(mark["tokens"], unit)), mark["request"]
    assert verdict.table.engine_stored.sum() > 0


def record_saved_trace(engine: str) -> Path:
    """Record tests/data/kv_events_ENGINE.json from the real engine (one server start)."""
    import dataclasses

    from servelab.engines.server import Server
    from servelab.machine import profiles
    from servelab.measure.kv_events import record_workload
    from servelab.measure.prefix_cache.live import cache_options

    prof = dataclasses.replace(profiles.load("cpu"), max_model_len=SAVED_MAX_MODEL_LEN)
    requests = eviction_workload(SAVED_BUDGET)
    with Recorder(engine, prof) as recorder, Server(engine, prof, kv_cache_tokens=SAVED_BUDGET,
                                                    **cache_options(engine), **recorder.options()) as server:
        trace = record_workload(server, recorder, requests)
    path = DATA / f"kv_events_{engine}.json"
    document = {"recorded": f"python -m tests.test_measure_kv_events {engine}", "kv_cache_tokens": SAVED_BUDGET,
                "max_model_len": SAVED_MAX_MODEL_LEN, "workload": {"names": requests.names, "about": requests.about},
                "trace": trace.to_dict()}
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    return path




# ---- requests that decode (chapter 03): the paging referee on saved traces -------------------------------------
# Recorded with `python -m tests.test_measure_kv_events ENGINE decode` (`record_saved_decode_trace`): the paging
# workload for a budget of DECODE_BUDGET tokens (5 usable vLLM blocks), max_model_len DECODE_MAX_MODEL_LEN.
DECODE_BUDGET, DECODE_MAX_MODEL_LEN = 768, 640  # vLLM: max_model_len fits the usable blocks


def saved_decode(engine: str) -> Trace:
    return Trace.from_dict(json.loads((DATA / f"kv_events_decode_{engine}.json").read_text())["trace"])


def test_paging_workload_sizes_in_blocks():
    from servelab.measure.kv_events.decode_sims import figure_steps
    from servelab.measure.kv_events.paging import paging_workload

    w = paging_workload(31, 128, 2048)
    assert len(w.doc) == 256 and w.outputs[0] == 129 and len(w.others[0]) == 14 * 128 + 64
    assert len(w.prompt(1, [list(range(129))])) == 4 * 128 - 2
    assert figure_steps(256, 129, 128) == [(128, 2)]  # request 0's output fills block 2; its last output opens none
    assert figure_steps(510, 4, 128) == [(2, 3)]
    with pytest.raises(ValueError, match="max_model_len"):
        paging_workload(31, 128, 1024)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_paging_referee_agrees_with_the_saved_decode_traces(engine):
    from servelab.measure.kv_events.paging import paging_workload
    from servelab.measure.kv_events.paging_replay import replay_paging

    trace = saved_decode(engine)
    requests = paging_workload(DECODE_BUDGET // 128 - 1, 128, DECODE_MAX_MODEL_LEN)
    outputs = [r["output"] for r in trace.requests]
    assert [tuple(r["tokens"]) for r in trace.requests] == [requests.prompt(i, outputs) for i in range(4)]
    assert [len(o) for o in outputs] == list(requests.outputs)
    verdict = replay_paging(trace)
    assert verdict.agree, (verdict.problems, verdict.table.to_dict("records"))
    table = verdict.table
    assert (table.engine_stored == table.sim_stored).all() and (table.engine_removed == table.sim_removed).all()
    assert (table.engine_hit[1:] == table.sim_hit[1:]).all() and table.engine_hit[2] == 3 * 128
    if engine == "vllm":  # request 0: its 2 prompt blocks and the block its output filled; no block for the last
        assert table.engine_stored.tolist()[:3] == [0, 3, 1]
    else:  # SGLang inserts the committed KV: the prompt and every output but the last
        assert table.engine_stored.tolist()[:3] == [0, 256 + 128, 510 + 3 - 384]
    assert table.engine_removed.iloc[-1] > 0  # document C evicts
    with pytest.raises(ValueError, match="not a decode trace"):
        replay_paging(saved(engine))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_paging_referee_catches_corrupted_decode_traces(engine):
    from servelab.measure.kv_events.paging_replay import replay_paging

    no_decode_store = saved_decode(engine)  # the store of request 0's decode block (vLLM) or of its outputs
    stored = [e for m in no_decode_store.messages if m["ts"] < no_decode_store.requests[1]["send"]
              for e in m["events"] if e["type"] == "BlockStored"]
    stored[-1]["block_hashes"].pop()
    stored[-1]["token_ids"] = stored[-1]["token_ids"][:len(stored[-1]["block_hashes"]) * stored[-1]["block_size"]]
    verdict = replay_paging(no_decode_store)
    assert not verdict.agree and not verdict.table.match[1]
    changed = saved_decode(engine)  # an output token the engine did not generate
    changed.requests[0]["output"][5] += 1
    assert not replay_paging(changed).agree
    shorter = saved_decode(engine)  # one output fewer: block 2 (vLLM), the 128th output (SGLang) never stored
    shorter.requests[0]["output"].pop()
    assert not replay_paging(shorter).agree


def test_paging_frames_show_blocks_filled_while_decoding():
    from servelab.measure.kv_events.paging_replay import replay_paging

    verdicts = {engine: replay_paging(saved_decode(engine)) for engine in ENGINES}
    steps = json.loads(json.dumps(frames(**verdicts)))["steps"]
    decoding = [s for s in steps if s["phase"] == "decoding"]
    assert [s["caption"] for s in decoding] == ["request 0 decoding: block 2 full", "request 1 decoding: block 3 full"]
    assert len(steps) == 1 + 2 * 4 + 2
    first = decoding[0]["vllm"]
    assert [b["state"] for b in first["blocks"]].count("used") == 3 and len(first["events"]) == 1
    assert first["events"][0].startswith("stored ") and first["events"][0].split()[1] in {b["hash"] for b in
                                                                                          first["blocks"]}
    admitted = steps[1]["vllm"]  # request 0 admitted: its prompt's 2 blocks stored, not yet the output's
    assert len(admitted["events"]) == 2 and [b["state"] for b in admitted["blocks"]].count("used") == 2
    assert decoding[0]["sglang"]["events"] == [] and any(n["state"] == "locked" for n in decoding[1]["sglang"]["nodes"])
    # SGLang checkpoints the prompt right after the prefill (checkpoint_kv_cache) and adds the outputs at the finish
    assert steps[1]["sglang"]["events"] == ["stored " + steps[1]["sglang"]["events"][0].split()[1] + " (256 tokens)"]
    assert [n["state"] for n in steps[1]["sglang"]["nodes"]] == ["locked"]
    assert steps[3]["phase"] == "finished" and steps[3]["sglang"]["events"][0].endswith("128 tokens)")
    assert steps[-1]["phase"] == "finished" and any(e.startswith("removed") for s in steps[-3:]
                                                    for e in s["vllm"]["events"])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_referees_refuse_a_missing_hit_report(engine):
    from servelab.measure.kv_events.paging_replay import replay_paging

    unreported = saved_decode(engine)
    unreported.requests[1]["cached_tokens"] = None
    verdict = replay_paging(unreported)
    assert not verdict.agree and "did not report" in verdict.table.note[2]
    unreported = saved(engine)
    unreported.requests[2]["cached_tokens"] = None
    assert not replay(unreported).agree


def test_the_referees_refuse_sglang_pages_of_more_than_one_token():
    from servelab.measure.kv_events.paging_replay import replay_paging

    for trace, referee in ((saved_decode("sglang"), replay_paging), (saved("sglang"), replay)):
        trace.capacity["block_size"] = 64
        verdict = referee(trace)
        assert not verdict.agree
        assert verdict.problems[0] == "SGLang served pages of 64 tokens; this referee models pages of 1"


def record_saved_decode_trace(engine: str) -> Path:
    """Record tests/data/kv_events_decode_ENGINE.json from the real engine (one server start)."""
    import dataclasses

    from servelab.engines.server import Server
    from servelab.machine import profiles
    from servelab.measure.kv_events.paging import paging_workload, record_paging_workload
    from servelab.measure.prefix_cache.live import cache_options

    prof = dataclasses.replace(profiles.load("cpu"), max_model_len=DECODE_MAX_MODEL_LEN)
    requests = paging_workload(DECODE_BUDGET // 128 - 1, 128, DECODE_MAX_MODEL_LEN)
    with Recorder(engine, prof) as recorder, Server(engine, prof, kv_cache_tokens=DECODE_BUDGET,
                                                    **cache_options(engine), **recorder.options()) as server:
        trace = record_paging_workload(server, recorder, requests)
    path = DATA / f"kv_events_decode_{engine}.json"
    document = {"recorded": f"python -m tests.test_measure_kv_events {engine} decode",
                "kv_cache_tokens": DECODE_BUDGET, "max_model_len": DECODE_MAX_MODEL_LEN,
                "workload": {"names": requests.names, "about": requests.about}, "trace": trace.to_dict()}
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    return path


if __name__ == "__main__":
    print(record_saved_decode_trace(sys.argv[1]) if sys.argv[2:] == ["decode"] else record_saved_trace(sys.argv[1]))


def test_a_trace_cut_to_its_window_keeps_every_message_and_the_verdict():
    trace = saved("vllm")
    early = {**trace.messages[0], "ts": trace.begin - 100.0,
             "events": [{"type": "BlockStored", "block_hashes": ["ab"], "parent_block_hash": None,
                         "token_ids": [1] * 128, "block_size": 128}]}
    padded = Trace(**{**trace.to_dict(), "messages": [early, *[{**m, "seq": m["seq"] + 1} for m in trace.messages]]})
    cut = padded.window_only()
    assert [m["seq"] for m in cut.messages] == [m["seq"] for m in padded.messages]
    assert cut.messages[0]["events"] == [] and cut.messages[1:] == padded.messages[1:]
    assert replay(cut).agree


def test_a_chapter_saves_each_recording_with_its_referee_and_gets_the_figure(tmp_path, monkeypatch, capsys):
    from servelab.book import kv_event_recording
    from servelab.machine import profiles

    monkeypatch.setenv("SERVELAB_RESULTS", str(tmp_path))
    recordings = {engine: (saved(engine), replay(saved(engine))) for engine in ("vllm", "sglang")}
    figure = kv_event_recording.save_and_draw("kv_test", recordings, profiles.load("cpu"), "t", kv_tokens=640)
    assert len(figure._repr_html_()) > 1000
    saved_files = sorted(p.name for p in (tmp_path / "cpu").iterdir())
    assert {"kv_test_vllm.json", "kv_test_sglang.json", "kv_test_referee_vllm.csv", "kv_test_referee_sglang.csv",
            "kv_test_vllm.meta.json"} <= set(saved_files)
    kv_event_recording.print_referees(*(r for _, r in recordings.values()))
    assert "not compared:" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ENGINES)
def test_a_message_lost_before_a_flushed_window_is_told_not_failed_and_inside_it_fails(engine):
    early = saved(engine)
    before = [{**early.messages[0], "seq": seq, "ts": early.begin - 10.0 + seq, "events": []} for seq in (0, 1)]
    early.messages = [*before, *[{**m, "seq": m["seq"] + 2} for m in early.messages]]
    del early.messages[0]  # the subscriber never got seq 0, sent before the window; seq 1 came, before it too
    verdict = replay(early)
    assert verdict.agree and any("were not received" in d for d in verdict.differences)
    late = saved(engine)
    late.messages = [{**m, "seq": m["seq"] + 1} for m in late.messages]  # seq 0 missing, and it was in the window
    late.messages[0]["ts"] = max(late.messages[0]["ts"], late.begin)
    assert any("were not received" in p for p in replay(late).problems)


def test_the_figure_names_a_node_by_where_its_tokens_first_appear_and_blocks_as_vllm_numbers_them():
    from servelab.measure.kv_events.frames import where

    traces = {engine: saved(engine) for engine in ENGINES}
    sequences = [mark["tokens"] for mark in traces["vllm"].requests]
    steps = frames(**{e: replay(t) for e, t in traces.items()}, sequences=sequences)["steps"]
    labels = {n["label"] for s in steps for n in s["sglang"]["nodes"]}
    assert labels and all(label.startswith("r") and "–" in label for label in labels), labels
    assert "r0 0–" in " ".join(sorted(labels))  # document A's first tokens, first seen in request 0
    assert min(b["id"] for s in steps for b in s["vllm"]["blocks"]) == 1  # vLLM's block 0 is its null block
    assert where([9, 9, 9], 3, [[1, 2], [5, 9, 9, 9]]) == "r1 1–3" and where([7], 1, [[1]]) is None


def test_the_eviction_story_keeps_its_shape_at_a_gpu_block_size():
    from servelab.measure.kv_events.workload import tails

    assert tails(128) == (40, 50)  # the CPU build's block: the traces above
    for block in (16, 32, 64):
        doc_tail, b_tail = tails(block)
        # B's tail under one block: SGLang frees B's room from A's tail and the question, and keeps A's head
        assert 1 <= doc_tail < block and 1 <= b_tail <= block
    small = eviction_workload(18432, 16)
    assert len(small.prompts[3]) % 16 == tails(16)[1] and len(small.prompts[0]) % 16 == tails(16)[0]
