"""vllm_bench_runs.read_counter: the engine's counter summed over its series, 0 before its first increment."""

from __future__ import annotations

import importlib.util
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from servelab.engines.engine_side import script

spec = importlib.util.spec_from_file_location("vllm_bench_runs", script("vllm_bench_runs.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

DECLARED = "# HELP sglang:cached_tokens_total Cached tokens\n# TYPE sglang:cached_tokens_total counter\n"
HIT = (DECLARED + 'sglang:cached_tokens_total{cache_source="device"} 63.0\n'
       'sglang:cached_tokens_total{cache_source="host"} 1.0\n'
       'sglang:cached_tokens_created{cache_source="device"} 1.7e9\n')
VLLM = ("# HELP vllm:prefix_cache_hits_total hits\n# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0\n')


@pytest.fixture
def metrics_url():
    page = {"text": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = page["text"].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield page, f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def test_counter_sums_its_series_and_ignores_created_samples(metrics_url):
    page, url = metrics_url
    page["text"] = HIT
    assert bench.read_counter(url, "sglang:cached_tokens") == 64.0
    page["text"] = VLLM
    assert bench.read_counter(url, "vllm:prefix_cache_hits") == 256.0
    assert bench.read_counter(url, "vllm:prefix_cache_hits_total") == 256.0


def test_counter_reads_zero_before_its_first_increment(metrics_url):
    page, url = metrics_url
    page["text"] = DECLARED
    assert bench.read_counter(url, "sglang:cached_tokens") == 0.0
    page["text"] = VLLM
    assert bench.read_counter(url, "sglang:cached_tokens") == 0.0  # absent: the notebook's shared-prefix run checks
