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
