"""Which block sizes chapter 03 compares and probes, and reading an engine's refusal from its log."""

from __future__ import annotations

import pytest

from servelab.measure.paging import block_size as bsz


@pytest.mark.parametrize(("default", "other"), [(128, 64), (16, 32), (64, 32), (32, 64), (256, 128)])
def test_the_second_block_size_is_accepted_by_every_backend(default: int, other: int) -> None:
    got = bsz.comparison_block_size(default)
    assert got == other and got % bsz.COARSEST_GRANULE == 0 and got != default


def test_the_probe_is_the_papers_16_unless_that_is_the_default() -> None:
    assert bsz.probe_block_size(128) == 16
    assert bsz.probe_block_size(16) == 8
    with pytest.raises(ValueError, match="default must be an integer >= 1"):
        bsz.probe_block_size(0)


@pytest.mark.parametrize(("small", "large"), [(64, 128), (16, 32), (32, 128)])
@pytest.mark.parametrize("about", [1, 300, 1000, 4000])
def test_the_sharing_prompt_makes_the_smaller_block_share_more(about: int, small: int, large: int) -> None:
    n = bsz.sharing_prompt_tokens(about, small, large)
    assert bsz.shared_prompt_tokens(n, small) >= bsz.shared_prompt_tokens(n, large) + small
    assert abs(n - about) <= large or n < large * 2


def test_shared_tokens_stop_one_token_short_of_the_prompt() -> None:
    assert bsz.shared_prompt_tokens(1024, 128) == 896  # a full last block is not a hit: at most 1023 tokens
    assert bsz.shared_prompt_tokens(1025, 128) == 1024
    with pytest.raises(ValueError, match="must be a multiple"):
        bsz.sharing_prompt_tokens(1000, 48, 128)


def test_first_error_line_skips_warnings_that_mention_errors() -> None:
    log = "\n".join([
        "(APIServer pid=1) WARNING 11-30 [x.py:1] This can cause fd limit errors like `OSError: [Errno 24]`",
        "(Worker pid=2) ERROR 11-30 12:46:00 [multiproc_executor.py:1063]     raise ValueError(",
        "(Worker pid=2) ERROR 11-30 12:46:00 [multiproc_executor.py:1063] ValueError: No common block size for 16 "
        "(CPU_ATTN: [MultipleOf(32)]).",
        "RuntimeError: Engine core initialization failed.",
    ])
    assert bsz.first_error_line(log) == "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
    assert bsz.first_error_line("all good\n") == ""


@pytest.mark.engine_venv
def test_vllms_argument_checks_accept_a_block_size_the_cpu_backend_refuses(require_engine, cpu) -> None:
    """The chapter says so: only the engine's start, not its parser, knows the backend's block sizes."""
    from servelab.engines import flags
    from servelab.engines.launch import command
    from servelab.machine import models

    require_engine("vllm")
    argv = command("vllm", cpu, models.resolve(cpu.model), 8000, {"kv_cache_tokens": 4096, "block_size": 16}).argv
    assert flags.check("vllm", argv).ok


def test_a_refusal_names_the_block_size_on_cpu_and_on_cuda():
    """Chapter 03's check: the CPU backend's words and the CUDA platform's (vllm/platforms/cuda.py, the error of
    CudaPlatformBase when no attention backend accepts the configuration) both count; a refusal for another
    reason or a start does not."""
    cuda = ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, "
            "dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=8, use_mla=False). Reasons: {FLASH_ATTN: "
            "[block_size not supported], FLASHINFER: [block_size not supported]}.")
    assert bsz.refusal_names_block_size(cuda)
    cpu = ("RuntimeError: Worker failed with error 'No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).', "
           "please check the stack trace above for the root cause")  # chapter 03's refusal on the cpu profile
    assert bsz.refusal_names_block_size(cpu)
    assert not bsz.refusal_names_block_size("ValueError: To serve at least one request ...")
    other = cuda.replace("block_size not supported", "head_size not supported")  # refused, but not for the size
    assert "block_size=8" in other and not bsz.refusal_names_block_size(other)
    assert not bsz.refusal_names_block_size("")
    assert not bsz.refusal_names_block_size(None)
