"""CPU STAND-IN for ``sgl_kernel`` -- NOT the real SGLang kernel library.

Pinned to sglang 0.5.23 (``SGLANG_VERSION``). The ``sgl_kernel`` wheel sglang pins is a CUDA build that
cannot load without a GPU, yet with ``SGLANG_USE_CPU_ENGINE=1`` SGLang imports eight ``*_cpu`` names from
it at module level, so the server cannot even start. This package provides those names and nothing else:

* ``OPS``: two small index/copy ops, implemented in plain torch (``ctypes`` only to view the raw buffer
  addresses SGLang passes) and tested against a torch reference.
* ``UNSUPPORTED``: six speculative-decoding ops, present only so the imports succeed; calling one raises
  NotImplementedError.

In 0.5.23 all eight are called only with ``--speculative-algorithm``; plain CPU serving (scheduler, radix
cache, chunked prefill, torch_native attention) calls none of them. No ``torch.ops.sgl_kernel`` op is
registered, so SGLang's ``cpu_has_amx_support()`` stays False and its torch fallbacks run. Any other name
raises ImportError naming it. The package refuses to load when CUDA is available or when
``SGLANG_USE_CPU_ENGINE`` is not "1", so it never stands in for the real kernel on a GPU.

servelab puts ``servelab/sgl_kernel_stand_in`` first on the server's PYTHONPATH on the cpu profile only.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import os
import sys

import torch

SGLANG_VERSION = "0.5.23"
OPS = ("assign_req_to_token_pool_cpu", "copy_all_layer_kv_cache_cpu")
# Imported at module level by sglang/kernels/ops/speculative/{eagle,cache_locs,spec_tree}.py on the CPU
# engine; speculative decoding does not run on CPU with torch_native attention anyway.
UNSUPPORTED = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
)
__version__ = f"servelab-cpu-stand-in-for-sglang-{SGLANG_VERSION}"

if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
    raise ImportError("servelab sgl_kernel stand-in: refusing to load, SGLANG_USE_CPU_ENGINE is not '1'")
if torch.cuda.is_available():
    raise ImportError("servelab sgl_kernel stand-in: refusing to load, CUDA is available (use the real one)")


def _missing(name: str) -> str:
    return (
        f"servelab sgl_kernel CPU stand-in (sglang {SGLANG_VERSION}) does not implement {name!r}; "
        f"it only provides {', '.join(OPS)} (and placeholders for {', '.join(UNSUPPORTED)})"
    )


def _unsupported(name: str) -> object:
    def op(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            f"servelab sgl_kernel CPU stand-in: {name} (speculative decoding) is not implemented; "
            "run the CPU engine without --speculative-algorithm"
        )

    op.__name__ = op.__qualname__ = name
    op.__doc__ = "Speculative-decoding op: importable so SGLang's CPU modules load; raises when called."
    return op


for _name in UNSUPPORTED:
    globals()[_name] = _unsupported(_name)
del _name


def __getattr__(name: str) -> object:
    if name.startswith("__"):  # let Python's own probes (__path__, __file__, ...) behave normally
        raise AttributeError(name)
    # ImportError, not AttributeError: `from sgl_kernel import x` then keeps this message, and a
    # hasattr()/getattr(..., None) probe cannot quietly take a fallback either.
    raise ImportError(_missing(name), name=__name__)


class _NoSubmodules(importlib.abc.MetaPathFinder):
    """Make ``import sgl_kernel.<anything>`` fail with the stand-in's message, not a bare 'No module'."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.startswith(__name__ + "."):
            raise ModuleNotFoundError(_missing(fullname), name=fullname)
        return None


if not any(isinstance(f, _NoSubmodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _NoSubmodules())


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write newly allocated KV slots into the request-to-token table, in place.

    SGLang (``srt/mem_cache/allocation.py``, ``alloc_for_spec_decode``) calls this after allocating
    KV-cache slots for a speculative-decoding batch: for request ``i`` the slots
    ``out_cache_loc[o_i : o_i + n_i]`` (``n_i = end_i - start_i``, ``o_i`` the sum of earlier ``n``) go to
    ``req_to_token[req_pool_indices[i], start_i:end_i]``. ``pool_len`` is the row length of
    ``req_to_token`` (its row stride). Returns nothing.
    """
    lens = (end_offset - start_offset).to(torch.int64)
    total = int(lens.sum())
    if total == 0:
        return
    rows = req_pool_indices.to(torch.int64).repeat_interleave(lens)
    first = torch.cumsum(lens, 0) - lens  # where each request's slots start in out_cache_loc
    shift = (start_offset.to(torch.int64) - first).repeat_interleave(lens)
    cols = torch.arange(total, dtype=torch.int64) + shift
    flat = req_to_token.view(-1)  # needs a contiguous table, as the real kernel does
    flat[rows * pool_len + cols] = out_cache_loc[:total].to(req_to_token.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Move KV-cache slots ``src_loc`` to ``tgt_loc`` in every layer's K and V buffer, in place.

    SGLang (``kernels/ops/kvcache/cache_move.py``, ``MHATokenToKVPool.move_kv_cache``) uses it to move
    accepted draft tokens' KV slots; the pool enables it, and runs it once as a warm-up at start, only
    when a speculative algorithm is set. ``data_ptrs`` holds the base address of each contiguous buffer
    (uint64), ``strides`` the bytes per slot of each buffer; slot rows are copied as raw bytes. All source
    rows are read before any target row is written, so overlapping ``src_loc``/``tgt_loc`` are safe.
    """
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError("copy_all_layer_kv_cache_cpu: tgt_loc and src_loc differ in length")
    if tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.to(torch.int64), src_loc.to(torch.int64)
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(ptr))
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        buf[tgt] = buf[src]  # advanced indexing gathers a copy first
