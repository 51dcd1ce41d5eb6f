"""Chapter 06's measurement helpers: vLLM's spec-decode counters, bandwidth, the decode roofline."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from servelab.engines.metrics import Metrics
from servelab.measure.speculative.verification import (
    Roofline,
    decode_roofline,
    forward_seconds_bound,
    llama_parameters,
    matmul_flops,
    memory_bandwidth,
    safetensors_parameters,
    spec_decode_counts,
)

K = 3


def _exposition(drafts: int, draft_tokens: int, per_pos: list[int], engines: int = 1) -> Metrics:
    """A /metrics page with vLLM's spec-decode counters, written by prometheus_client as vLLM writes it
    (names and labels as in vllm/v1/spec_decode/metrics.py and vllm/v1/metrics/loggers.py)."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    made = {name: Counter(name, doc, labels, registry=registry) for name, doc in [
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")]}
    per_position = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                           [*labels, "position"], registry=registry)
    for engine in map(str, range(engines)):
        made["vllm:spec_decode_num_drafts"].labels("m", engine).inc(drafts)
        made["vllm:spec_decode_num_draft_tokens"].labels("m", engine).inc(draft_tokens)
        made["vllm:spec_decode_num_accepted_tokens"].labels("m", engine).inc(sum(per_pos))
        for pos, count in enumerate(per_pos):
            per_position.labels("m", engine, str(pos)).inc(count)
    return Metrics.parse(generate_latest(registry).decode())


def test_counters_become_the_engines_rates_and_the_theorys_alpha():
    before = _exposition(100, 300, [80, 50, 30])
    after = _exposition(1100, 3300, [880, 560, 350])  # 1000 drafts of 3 tokens in between
    counts = spec_decode_counts(before, after)
    assert (counts.drafts, counts.draft_tokens, counts.accepted, counts.k) == (1000, 3000, 1630, K)
    assert counts.accepted_per_pos == [800, 510, 320]
    assert counts.acceptance_rate == pytest.approx(1630 / 3000)
    assert counts.mean_acceptance_length == pytest.approx(1 + 1630 / 1000)
    assert counts.full_drafts
    assert counts.survival() == pytest.approx([0.8, 0.51, 0.32])
    assert counts.conditional_rates() == pytest.approx([0.8, 510 / 800, 320 / 510])
    fit = counts.iid_fit()
    assert fit.alpha == pytest.approx(1630 / (1630 + 1000 - 320))  # accepted / (accepted + rejections)
    assert fit.observed.tolist() == [200, 290, 190, 320] and fit.expected.sum() == pytest.approx(1000)


def test_counters_of_several_engines_add_up_and_short_drafts_are_flagged():
    counts = spec_decode_counts(_exposition(0, 0, [0, 0, 0], engines=2), _exposition(10, 25, [8, 5, 2], engines=2))
    assert (counts.drafts, counts.draft_tokens, counts.accepted_per_pos) == (20, 50, [16, 10, 4])
    assert not counts.full_drafts  # 50 draft tokens < 3 x 20: some n-gram drafts were shorter than k


def test_a_server_without_speculation_or_without_drafts_is_one_clear_error():
    plain = Metrics.parse("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
    with pytest.raises(ValueError, match="--speculative-config"):
        spec_decode_counts(plain, plain)
    same = _exposition(5, 15, [3, 2, 1])
    with pytest.raises(ValueError, match="no draft was verified"):
        spec_decode_counts(same, same)


def test_bandwidth_and_flops_are_positive_and_quick_on_tiny_inputs():
    t0 = time.perf_counter()
    bw = memory_bandwidth(n_bytes=1 << 20, repeats=2)
    assert bw.read_gb_s > 0 and bw.copy_gb_s > 0 and bw.n_bytes == 1 << 20
    assert matmul_flops(n=64, repeats=2) > 0
    assert time.perf_counter() - t0 < 5
    with pytest.raises(ValueError, match="n_bytes must be an integer >= 8"):
        memory_bandwidth(n_bytes=4)


# A Llama-style toy: hidden 8, 2 layers, vocabulary 10, 2 heads of 4, 1 KV head, MLP 16, tied embeddings.
TOY_CONFIG = {"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16, "tie_word_embeddings": True}
TOY_SHAPES = {"model.embed_tokens.weight": [10, 8], "model.norm.weight": [8]} | {
    f"model.layers.{i}.{name}": shape for i in range(2) for name, shape in [
        ("self_attn.q_proj.weight", [8, 8]), ("self_attn.k_proj.weight", [4, 8]), ("self_attn.v_proj.weight", [4, 8]),
        ("self_attn.o_proj.weight", [8, 8]), ("mlp.gate_proj.weight", [16, 8]), ("mlp.up_proj.weight", [16, 8]),
        ("mlp.down_proj.weight", [8, 16]), ("input_layernorm.weight", [8]), ("post_attention_layernorm.weight", [8])]}
TOY_PARAMETERS = 80 + 2 * (64 + 32 + 32 + 64 + 3 * 128 + 16) + 8  # counted by hand: 1272


def _write_safetensors(path, shapes: dict[str, list[int]]) -> None:
    """A float32 safetensors file of zeros, written from the format's specification."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


@pytest.fixture
def toy_model(tmp_path):
    _write_safetensors(tmp_path / "model.safetensors", TOY_SHAPES)
    (tmp_path / "config.json").write_text(json.dumps(TOY_CONFIG))
    return tmp_path


def test_parameters_from_safetensors_headers_and_from_the_config_agree(toy_model):
    assert safetensors_parameters(toy_model) == TOY_PARAMETERS == 1272
    assert llama_parameters(TOY_CONFIG) == TOY_PARAMETERS
    assert llama_parameters(TOY_CONFIG | {"tie_word_embeddings": False}) == TOY_PARAMETERS + 80  # its own LM head
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        safetensors_parameters(toy_model / "nowhere")


def test_decode_roofline_arithmetic(toy_model):
    roof = decode_roofline(str(toy_model), "bfloat16", bandwidth_gb_s=1e-6)  # 1000 bytes/s
    assert roof.weight_bytes == 2 * TOY_PARAMETERS
    assert roof.kv_bytes_per_context_token == 2 * 2 * 1 * 4 * 2  # K and V x layers x KV heads x head dim x bytes
    assert roof.tokens_per_s() == pytest.approx(1000 / 2544)
    assert roof.tokens_per_s(context_len=100) == pytest.approx(1000 / (2544 + 3200))
    assert Roofline(10**9, 10**5, 100.0).tokens_per_s(10**4) == pytest.approx(50.0)  # KV as big as the weights
    with pytest.raises(ValueError, match="bandwidth_gb_s must be > 0"):
        decode_roofline(str(toy_model), "float32", 0.0)


def test_a_forward_over_few_tokens_costs_one_weight_read_then_grows_with_compute():
    # 1e8 fp32 weights at 100 GB/s: 4 ms to read; 2e8 operations per token at 1e11 FLOP/s: 2 ms per token
    times = [forward_seconds_bound(n, 10**8, "float32", 100.0, 1e11) for n in (1, 2, 4, 8)]
    assert times == pytest.approx([0.004, 0.004, 0.008, 0.016])
