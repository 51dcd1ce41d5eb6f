import json

import pytest

from servelab.sim import kv_memory
from servelab.sim.kv_memory import GIB, ModelShape

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
           "head_dim": 64}


def test_bytes_per_token_counts_k_and_v_per_layer_and_kv_head():
    shape = ModelShape.from_config("smollm2", SMOLLM2)
    assert kv_memory.kv_bytes_per_token(shape, "float32") == 2 * 30 * 3 * 64 * 4
    assert kv_memory.kv_bytes_per_token(shape, "bfloat16") == 2 * 30 * 3 * 64 * 2


def test_known_shapes_match_published_kv_sizes():
    shapes = kv_memory.known_shapes()
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token in bf16.
    assert kv_memory.kv_bytes_per_token(shapes["meta-llama/Llama-3.1-8B-Instruct"], "bf16") == 128 * 1024
    assert kv_memory.kv_bytes_per_token(shapes["meta-llama/Llama-3.1-70B-Instruct"], "bf16") == 320 * 1024
    assert kv_memory.kv_bytes_per_token(shapes["Qwen/Qwen2.5-7B-Instruct"], "bf16") == 56 * 1024


def test_head_dim_defaults_to_hidden_over_heads(tmp_path):
    cfg = {k: v for k, v in SMOLLM2.items() if k != "head_dim"}
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    assert ModelShape.from_config_file(path).head_dim == 64


def test_capacity_is_whole_blocks():
    shape = ModelShape.from_config("smollm2", SMOLLM2)
    tokens = kv_memory.kv_capacity_tokens(1 * GIB, shape, "float32", block_size=128)
    assert tokens % 128 == 0
    assert tokens <= GIB / kv_memory.kv_bytes_per_token(shape, "float32") < tokens + 128


def test_plan_weights_that_do_not_fit_leave_no_sequences():
    shape = kv_memory.known_shapes()["meta-llama/Llama-3.1-70B-Instruct"]
    assert not kv_memory.plan(shape, 80, "bf16", 8192).fits
    small = kv_memory.plan(kv_memory.known_shapes()["meta-llama/Llama-3.1-8B-Instruct"], 80, "bf16", 8192)
    assert small.fits and small.max_sequences * small.kv_per_sequence_gib <= small.kv_budget_gib


def test_longer_context_means_fewer_sequences():
    shape = kv_memory.known_shapes()["Qwen/Qwen2.5-7B-Instruct"]
    counts = [kv_memory.plan(shape, 24, "bf16", n).max_sequences for n in (1024, 4096, 16384)]
    assert counts[0] > counts[1] > counts[2]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"memory_gib": 0}, "memory_gib"), ({"context_len": -1}, "context_len"), ({"utilization": 1.5}, "utilization"),
    ({"dtype": "fp6"}, "'fp6'"), ({"block_size": 0}, "block_size"),
])
def test_bad_planner_input_names_the_value(kwargs, needle):
    shape = ModelShape.from_config("smollm2", SMOLLM2)
    args = {"memory_gib": 1, "dtype": "float32", "context_len": 128} | kwargs
    with pytest.raises(ValueError, match=needle):
        kv_memory.plan(shape, **args)
