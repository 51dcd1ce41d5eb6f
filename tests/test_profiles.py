import pytest

from servelab.machine import profiles


def test_every_profile_loads_with_engines_and_model():
    for name in profiles.names():
        p = profiles.load(name)
        assert p.vllm_env and p.sglang_env and p.model
        assert p.dtype in ("float32", "bfloat16", "float16")
        assert p.chunk_sizes == sorted(p.chunk_sizes)


def test_unknown_profile_names_the_valid_ones():
    with pytest.raises(profiles.UnknownProfile) as err:
        profiles.load("gpu-7g")
    message = str(err.value)
    assert "'gpu-7g'" in message
    for name in ["auto", *profiles.names()]:
        assert name in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [([], "cpu"), ([8.0], "cpu"), ([22.5], "gpu-24g"), ([40.0], "gpu-24g"), ([79.6], "gpu-80g"), ([139.8], "gpu-80g")],
)
def test_detect_picks_the_largest_profile_the_gpu_fits(gpus, expected):
    assert profiles.detect(gpus) == expected


def test_cpu_profile_is_float32_and_local():
    p = profiles.load("cpu")
    assert p.is_cpu and p.dtype == "float32" and p.model.startswith("local:")
    assert not profiles.load("gpu-80g").is_cpu


def _without(tmp_path, key: str):
    """A copy of the shipped cpu profile without the line setting `key`."""
    path = tmp_path / "profiles.toml"
    lines = profiles.PROFILES_FILE.read_text().split("[gpu-24g]")[0].splitlines()
    path.write_text("\n".join(line for line in lines if not line.startswith(f"{key} =")))
    return path


def test_the_shipped_cpu_profile_loads_from_a_copy(tmp_path):
    assert profiles.load("cpu", _without(tmp_path, "no such key")) == profiles.load("cpu")


@pytest.mark.parametrize(("body", "needles"), [
    ("kv_cache_gb = 1.0", ["unknown key 'kv_cache_gb' = 1.0", "accepted keys:", "kv_cache_tokens"]),
    ("kv_cache_tokens = 0", ["kv_cache_tokens = 0 is not accepted", "an integer >= 1"]),
    ("kv_cache_tokens = 1.5", ["kv_cache_tokens = 1.5 is not accepted", "an integer >= 1"]),
    ("kv_cache_tokens = true", ["kv_cache_tokens = True is not accepted"]),
    ('max_model_len = "2048"', ["max_model_len = '2048' is not accepted", "an integer >= 16"]),
    ("chunk_sizes = [64, 32]", ["chunk_sizes = [64, 32] is not accepted", "ascending"]),
    ('device = "tpu"', ["device = 'tpu' is not accepted", "one of cpu, cuda"]),
    ('dtype = "fp32"', ["dtype = 'fp32' is not accepted", "one of float32, bfloat16, float16"]),
    ('vllm_env = "sglang-cpu"', ["vllm_env = 'sglang-cpu' is not accepted", "a vllm env"]),
    ("gpu_memory_utilization = 0.9", ["gpu_memory_utilization = 0.9 on a cpu profile"]),
])
def test_a_bad_value_is_one_line_naming_file_profile_key_value_and_what_is_accepted(tmp_path, body, needles):
    # TOML rejects a key set twice, so the shipped line goes before the bad one is written
    path = _without(tmp_path, body.split(" =")[0])
    path.write_text(path.read_text().replace("[cpu]", "[cpu]\n" + body, 1))
    with pytest.raises(profiles.BadProfile) as err:
        profiles.load("cpu", path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "[cpu]" in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("key", ["dtype", "model", "max_model_len", "vllm_flags", "speculative"])
def test_a_missing_key_is_one_line(tmp_path, key):
    path = _without(tmp_path, key)
    if key == "speculative":
        path.write_text(path.read_text().split("[cpu.speculative]")[0])
    with pytest.raises(profiles.BadProfile, match=f"profile \\[cpu\\]: missing key '{key}'; expected "):
        profiles.load("cpu", path)


def test_optional_keys_may_be_left_out(tmp_path):
    assert profiles.load("cpu", _without(tmp_path, "kv_cache_tokens")).kv_cache_tokens is None


def test_broken_toml_is_one_line(tmp_path):
    path = tmp_path / "profiles.toml"
    path.write_text("[cpu\n")
    with pytest.raises(ValueError, match="profiles.toml: not valid TOML") as err:
        profiles.load("cpu", path)
    assert "\n" not in str(err.value)


def test_nvidia_smi_lines_are_parsed_once_for_names_and_memory():
    from servelab.machine.hardware import Gpu, parse_nvidia_smi

    text = "NVIDIA H200, 143771\nNVIDIA L4, 23034\n\nnot a gpu line\n"
    assert parse_nvidia_smi(text) == [Gpu("NVIDIA H200", 143771 / 1024), Gpu("NVIDIA L4", 23034 / 1024)]
