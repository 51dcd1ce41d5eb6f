"""Chapter 02's reading of what an engine built: vLLM's /metrics and SGLang's /server_info, and vLLM's defaults."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servelab.measure.kv_memory import capacity as kv_capacity
from servelab.sim.kv_memory import tokens_held
from tests.conftest import PARTIAL_BUDGET, pinned_version

VLLM_METRICS = ('# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n'
                '# TYPE vllm:cache_config_info gauge\n'
                'vllm:cache_config_info{block_size="128",cache_dtype="auto",kv_cache_max_concurrency="2.4375",'
                'num_gpu_blocks="39"} 1.0\n')


@dataclass
class FakeServer:
    engine: str
    url: str


@pytest.fixture
def fake(request):
    """A local HTTP server answering /metrics and /server_info with the bodies the test gives."""
    bodies: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = bodies.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    request.addfinalizer(httpd.shutdown)
    return bodies, f"http://127.0.0.1:{httpd.server_address[1]}"


def test_vllm_capacity_counts_its_null_block_as_not_usable(fake):
    bodies, url = fake
    bodies["/metrics"] = VLLM_METRICS
    built = kv_capacity.engine_capacity(FakeServer("vllm", url))
    assert built == {"block_size": 128, "blocks": 39, "tokens": 39 * 128, "usable": 38 * 128, "max_concurrency": 2.4375}


def test_sglang_capacity_is_its_token_pool_paged_by_its_page_size(fake):
    bodies, url = fake
    bodies["/server_info"] = json.dumps({"page_size": 1, "internal_states": [
        {"max_total_num_tokens": 5000, "memory_usage": {"kvcache": 0.215, "weight": 0.5}}]})
    assert kv_capacity.engine_capacity(FakeServer("sglang", url)) == {
        "block_size": 1, "blocks": 5000, "tokens": 5000, "usable": 5000, "kv_gib": 0.215}
    bodies["/server_info"] = json.dumps({"page_size": 64, "max_total_num_tokens": 4992,
                                         "memory_usage": {"kvcache": 0.2}})
    assert kv_capacity.engine_capacity(FakeServer("sglang", url))["blocks"] == 78


def test_sglang_buffers_hold_the_pool_and_one_padding_page():
    assert kv_capacity.sglang_buffer_gib(2**20 - 1, 1, 1024) == 1.0
    assert kv_capacity.sglang_buffer_gib(4992, 64, 2**20) == 5056 / 1024
    with pytest.raises(ValueError, match="page_size >= 1.*got 10, 0, 4"):
        kv_capacity.sglang_buffer_gib(10, 0, 4)


def test_a_missing_sglang_field_is_named_not_defaulted(fake):
    bodies, url = fake
    bodies["/server_info"] = json.dumps({"max_total_num_tokens": 5000, "version": "x"})
    with pytest.raises(KeyError, match="no 'page_size'; keys: max_total_num_tokens, version"):
        kv_capacity.engine_capacity(FakeServer("sglang", url))


def test_server_info_is_sglangs():
    with pytest.raises(ValueError, match="server_info is SGLang's endpoint; this server runs 'vllm'"):
        kv_capacity.server_info(FakeServer("vllm", "http://127.0.0.1:9"))


@pytest.mark.engine_venv
def test_vllm_cache_defaults_come_from_its_engine_args(cpu, require_engine):
    require_engine("vllm")
    defaults = kv_capacity.vllm_cache_defaults(cpu)
    assert defaults["version"] == pinned_version(cpu.vllm_env).split("+")[0]
    assert 0 < defaults["gpu_memory_utilization"] <= 1
    assert defaults["kv_cache_memory_bytes"] is None  # unset: the utilization decides
    block = defaults["CacheConfig.DEFAULT_BLOCK_SIZE"]
    assert isinstance(block, int) and block >= 1


@pytest.mark.server
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_budget_of_partial_blocks_is_rounded_down_to_whole_blocks(live, engine):
    """PARTIAL_BUDGET is not a whole number of vLLM's CPU blocks: vLLM keeps whole blocks; SGLang pages by one
    token (its page size resolves to 1) and keeps all of them. (The session's shared servers run at it.)"""
    budget, built = PARTIAL_BUDGET, live[engine]["capacity"]
    assert built["tokens"] == tokens_held(budget, built["block_size"])
    assert budget - built["block_size"] < built["tokens"] <= budget
    assert built["usable"] == built["tokens"] - kv_capacity.RESERVED_BLOCKS[engine] * built["block_size"]
    if engine == "sglang":
        assert built["block_size"] == 1 and built["tokens"] == budget
    else:
        assert built["tokens"] < budget  # not a multiple of the CPU block: the remainder is dropped


def test_first_exception_is_the_root_cause_not_what_follows():
    log = ("WARNING [system_utils.py:255] fd limit errors like `OSError: [Errno 24] Too many open files`.\n"
           "INFO starting\n(EngineCore pid=1) \x1b[1;31mERROR\x1b[0m \x1b[90m[core.py:1]\x1b[0m ValueError: To serve"
           " at least one request\n"
           "Traceback ...\nRuntimeError: Engine core initialization failed. See root cause above.\n")
    assert kv_capacity.first_exception(log) == "ValueError: To serve at least one request"
    assert kv_capacity.first_exception("a\nkilled\n\n") == "killed"
    assert kv_capacity.first_exception("") == "(empty log)"


@pytest.mark.server
def test_vllm_refuses_a_budget_smaller_than_one_full_length_request(cpu, require_engine):
    require_engine("vllm")
    from servelab.measure.chapter_servers import Launch

    half = Launch("half a sequence", "vllm", {"kv_cache_tokens": cpu.max_model_len // 2})
    refused = kv_capacity.capacity_for_budget(half, cpu)
    assert refused["started"] is False
    assert refused["reason"].startswith("ValueError: To serve at least one request"), refused
