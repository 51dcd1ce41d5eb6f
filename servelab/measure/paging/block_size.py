"""Chapter 02: which block sizes to compare on an engine, and what the engine says about one it refuses.

vLLM's default block size is 16 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE`, `vllm/config/cache.py`);
its CPU platform raises it to 128 (`CpuPlatform.check_and_update_config`, `vllm/platforms/cpu.py`).
`--block-size` takes any positive integer, but each attention backend accepts only some
(`get_supported_kernel_block_sizes` in `vllm/v1/attention/backends/`): the CPU backend multiples of
32; FlashAttention, Triton and FlexAttention multiples of 16; FlashInfer 16, 32 or 64 (larger pages
only on Blackwell). A size no backend accepts stops the engine while it starts.
"""

from __future__ import annotations

import re
from typing import Any

from servelab.engines.server import EngineStartError
from servelab.integers import int_at_least

COARSEST_GRANULE = 32  # the CPU backend's MultipleOf(32); every GPU backend above accepts its multiples
PAPER_BLOCK_SIZE = 16  # the paper's choice and vLLM's default on GPUs
_ERROR = re.compile(r"^(?:\(.*?\) )?(?:ERROR .*?\] )?([A-Z]\w*(?:Error|Exception)): (.+)$")


def comparison_block_size(default: int) -> int:
    """A second block size every backend above accepts: half the default if that is a multiple of 32, else double.

    The CPU default, 128, gives 64 (smaller); the GPU default, 16, gives 32 (larger: half of 16 is
    below what the GPU backends accept).
    """
    default = int_at_least("default", default, 1, "the engine's block size in tokens")
    half = default // 2
    return half if default % 2 == 0 and half % COARSEST_GRANULE == 0 else 2 * default


def probe_block_size(default: int) -> int:
    """A block size to show the engine refusing: the paper's 16 where that is not the default, else 8."""
    default = int_at_least("default", default, 1, "the engine's block size in tokens")
    return PAPER_BLOCK_SIZE if default != PAPER_BLOCK_SIZE else PAPER_BLOCK_SIZE // 2


def sharing_prompt_tokens(about: int, small: int, large: int) -> int:
    """A prompt length near `about` at which blocks of `small` tokens share more of the prompt than `large`.

    Samples of one prompt share its full blocks, up to one token short of the prompt (vLLM caps a
    prefix-cache hit at `num_tokens - 1`): `(L - 1) // b * b` tokens for block size `b`. The two sizes
    share the same amount when `(L - 1) % large < small`; this length puts `(L - 1) % large` half-way
    between `small` and `large`, so they differ by at least `small` tokens.
    """
    small = int_at_least("small", small, 1)
    large = int_at_least("large", large, small + 1)
    if large % small:
        raise ValueError(f"large={large} must be a multiple of small={small}")
    about = int_at_least("about", about, 1, "tokens")
    offset = small + (large - small) // 2
    return 1 + offset + large * max(0, round((about - 1 - offset) / large))


def shared_prompt_tokens(prompt_tokens: int, block_size: int) -> int:
    """Prompt tokens that later samples find in the prefix cache: whole blocks, at most `prompt_tokens - 1`."""
    return (prompt_tokens - 1) // block_size * block_size


def first_error_line(log: str) -> str:
    """The first `SomeError: message` line of an engine log (a traceback's last line, or a logged one)."""
    for line in log.splitlines():
        if m := _ERROR.match(line.strip()):
            return f"{m.group(1)}: {m.group(2)}"
    return ""


def refused_start(launch: Any, profile: Any, timeout: float = 300) -> str:
    """Start a declared server (servelab.measure.chapter_servers.Launch), expecting the engine to refuse it; the
    first error line of its log. Returns "" when the engine started after all (it is stopped again at once)."""
    server = launch.server(profile)
    try:
        server.start(timeout=timeout)
    except EngineStartError:
        return first_error_line(server.log_path.read_text(errors="replace")) or server.log_tail(3)
    server.stop()
    return ""


def refusal_names_block_size(refusal: str | None) -> bool:
    """Whether an engine's refusal is about the block size, in either of vLLM's wordings: the CPU backend's
    ("block size") or the CUDA platform's attention-backend selection ("No valid attention backend found for cuda
    with ... block_size=8 ... Reasons: {FLASH_ATTN: [block_size not supported], ...}", CudaPlatformBase.
    get_valid_backends and AttentionBackend.validate_configuration)."""
    # Not "block_size" alone: the CUDA message repeats the whole configuration (block_size=8) whatever the reason.
    return bool(refusal) and ("block_size not supported" in refusal or "block size" in refusal.lower())
