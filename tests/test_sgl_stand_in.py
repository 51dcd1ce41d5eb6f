"""The CPU stand-in for sgl_kernel (servelab/engines/sgl_kernel_stand_in): op semantics, coverage, refusal.

The notebook kernel has no torch, so every check runs a short script under the sglang-cpu venv's python
(`$SERVELAB_HOME/envs/sglang-cpu`). They fail, not skip, when that venv is missing: CI builds it. So every
test here is marked `engine_venv`, except the one that starts the real server (`server`).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from servelab.engines import launch
from servelab.machine import engine_envs
from tests.sgl_recorder import RECORDER, read_record

STAND_IN = launch.SGL_STAND_IN
SGL_PY = engine_envs.get("sglang-cpu").python


@pytest.fixture(autouse=True)
def _needs_sglang_venv(require_engine) -> None:
    require_engine("sglang")


# Names the pinned SGLang looks up on sgl_kernel, inside try/except ImportError, with a fallback when absent.
# They are asked for but deliberately not provided. sglang/srt/models/inkling_common/norm.py does
# `try: from sgl_kernel import rmsnorm / except ImportError: rmsnorm = None` when the model registry
# imports every model module at start.
TOLERATED_PROBES = {"rmsnorm"}

def run_sgl(code: str, env: dict[str, str] | None = None, cpu_engine: bool = True, timeout: int = 300) -> str:
    """Run `code` under the sglang venv with the stand-in first on the path; return stdout, fail on error."""
    full = dict(os.environ, PYTHONPATH=str(STAND_IN), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    full.pop("SGLANG_USE_CPU_ENGINE", None)
    if cpu_engine:
        full["SGLANG_USE_CPU_ENGINE"] = "1"
    proc = subprocess.run(
        [str(SGL_PY), "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True, timeout=timeout
    )
    tail = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}\n{tail}"
    return proc.stdout


# (a) numeric semantics ---------------------------------------------------------------------------------


@pytest.mark.engine_venv
def test_assign_req_to_token_pool_matches_reference() -> None:
    out = run_sgl("""
        import torch
        from sgl_kernel import assign_req_to_token_pool_cpu

        torch.manual_seed(0)
        table = torch.randint(0, 1000, (6, 16), dtype=torch.int32)
        req_pool_indices = torch.tensor([4, 0, 2, 5])
        start = torch.tensor([3, 0, 7, 5])
        end = torch.tensor([7, 5, 7, 6])                      # request 2 gets no new slots
        out_cache_loc = torch.arange(100, 120, dtype=torch.int64)   # longer than the 10 slots used

        expect = table.clone()
        pos = 0
        for r, s, e in zip(req_pool_indices.tolist(), start.tolist(), end.tolist()):
            expect[r, s:e] = out_cache_loc[pos:pos + e - s].to(torch.int32)
            pos += e - s

        got = table.clone()
        ret = assign_req_to_token_pool_cpu(req_pool_indices, got, start, end, out_cache_loc, got.shape[1])
        assert ret is None
        assert got.dtype == torch.int32 and torch.equal(got, expect), (got, expect)

        empty = table.clone()
        assign_req_to_token_pool_cpu(req_pool_indices[:0], empty, start[:0], end[:0], out_cache_loc, 16)
        assert torch.equal(empty, table)
        print("ok")
    """)
    assert out.strip() == "ok"


@pytest.mark.engine_venv
def test_copy_all_layer_kv_cache_matches_reference() -> None:
    out = run_sgl("""
        import torch
        from sgl_kernel import copy_all_layer_kv_cache_cpu

        torch.manual_seed(0)
        rows = 12
        # Like MHATokenToKVPool: per layer a K and a V buffer [slots, heads, head_dim], plus one of another
        # dtype and row size, all contiguous; pointers as uint64 and strides in bytes, as SGLang builds them.
        bufs = [torch.randn(rows, 3, 8) for _ in range(4)] + [torch.randn(rows, 2, 4).to(torch.bfloat16)]
        data_ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
        strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in bufs])

        def check(tgt, src):
            expect = [b.clone() for b in bufs]
            for e in expect:
                e[tgt] = e[src].clone()
            copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)
            for b, e in zip(bufs, expect):
                assert torch.equal(b, e)

        check(torch.tensor([9, 10, 11]), torch.tensor([1, 2, 3]))
        check(torch.tensor([2, 3, 4]), torch.tensor([1, 2, 3]))   # overlapping: sources read first
        check(torch.tensor([0]), torch.tensor([0]))               # SGLang's warm-up call
        before = [b.clone() for b in bufs]
        copy_all_layer_kv_cache_cpu(data_ptrs, strides, torch.tensor([], dtype=torch.int64),
                                    torch.tensor([], dtype=torch.int64))
        assert all(torch.equal(b, e) for b, e in zip(bufs, before))
        print("ok")
    """)
    assert out.strip() == "ok"


@pytest.mark.engine_venv
def test_everything_else_fails_loudly() -> None:
    out = run_sgl("""
        import sgl_kernel
        assert set(sgl_kernel.OPS).isdisjoint(sgl_kernel.UNSUPPORTED)
        for name in sgl_kernel.UNSUPPORTED:
            try:
                getattr(sgl_kernel, name)()
            except NotImplementedError as e:
                assert name in str(e) and "stand-in" in str(e)
            else:
                raise AssertionError(name)
        try:
            from sgl_kernel import fused_experts  # noqa: F401
        except ImportError as e:
            assert "fused_experts" in str(e) and "stand-in" in str(e), e
        else:
            raise AssertionError("fused_experts imported")
        try:
            import sgl_kernel.kvcacheio  # noqa: F401
        except ImportError as e:
            assert "kvcacheio" in str(e) and "stand-in" in str(e), e
        else:
            raise AssertionError("submodule imported")
        print("ok")
    """)
    assert out.strip() == "ok"


# (b) coverage of what this SGLang version asks for -------------------------------------------------------


@pytest.mark.engine_venv
def test_stand_in_covers_what_the_cpu_server_imports(tmp_path: Path) -> None:
    """Dynamic, not a source scan: a scan of sglang finds hundreds of sgl_kernel uses, nearly all behind
    `if _is_cuda:`-style guards that a regex cannot evaluate. Instead, with the CPU engine switched on and
    a recorder wrapped round the stand-in, import the modules the CPU server loads at start (entrypoint,
    engine, scheduler, model runner, torch_native attention, sampler, the model registry, which imports
    every model module) and compare what was asked of sgl_kernel with what the stand-in provides.
    Lazy imports inside functions at request time are covered by the `server` test below.
    """
    log = tmp_path / "record.jsonl"
    out = run_sgl(
        RECORDER
        + textwrap.dedent("""
        import importlib, json
        import sglang
        for mod in ("sglang.launch_server", "sglang.srt.entrypoints.http_server",
                    "sglang.srt.managers.scheduler",
                    "sglang.srt.managers.detokenizer_manager", "sglang.srt.model_executor.model_runner",
                    "sglang.srt.layers.attention.torch_native_backend", "sglang.srt.layers.sampler",
                    "sglang.srt.models.llama"):
            importlib.import_module(mod)
        from sglang.srt.models.registry import ModelRegistry
        ModelRegistry.resolve_model_cls(["LlamaForCausalLM"])
        from sglang.srt.utils.common import cpu_has_amx_support
        print(json.dumps({"sglang": sglang.__version__, "amx": cpu_has_amx_support(), **_PINNED}))
    """),
        env={"SERVELAB_SGL_RECORD": str(log)},
    )
    info = json.loads(out.strip().splitlines()[-1])
    assert info["sglang"] == info["version"], "stand-in is pinned to another sglang: re-check what it imports"
    provided = set(info["ops"]) | set(info["unsupported"])
    rec = read_record(log)
    unexpected = rec["get"] - provided - TOLERATED_PROBES
    assert not unexpected, f"this sglang asks sgl_kernel for names the stand-in lacks: {sorted(unexpected)}"
    assert not rec["submodule"], f"this sglang imports sgl_kernel submodules: {sorted(rec['submodule'])}"
    stale = provided - rec["get"]
    assert not stale, f"stand-in provides names this sglang no longer imports: {sorted(stale)}"
    assert not rec["call"], f"ops called at import time: {rec['call']}"
    assert info["amx"] is False  # no torch.ops.sgl_kernel ops registered, so SGLang keeps its torch paths


@pytest.mark.server
def test_real_cpu_server_runs_on_the_stand_in(live) -> None:
    """The session's shared SGLang server runs with a recorder wrapped round the stand-in (conftest `live`) and
    answered greedy chat requests: nothing beyond the stand-in was asked for at request time, and plain
    serving called none of its ops."""
    rec = live["sglang"]["stand_in_record"]
    assert rec["get"], "recorder saw nothing: the stand-in was not imported by the server"
    assert not rec["get"] - set(_provided()) - TOLERATED_PROBES, rec["get"]
    assert not rec["submodule"], rec["submodule"]
    assert not rec["call"], f"plain serving called stand-in ops: {rec['call']}"
    assert any("Paris" in answer for answer in live["sglang"]["answers"]), live["sglang"]["answers"]


def _provided() -> tuple[str, ...]:
    """OPS + UNSUPPORTED, read from the stand-in's source (this interpreter has no torch to import it)."""
    import ast

    tree = ast.parse((STAND_IN / "sgl_kernel" / "__init__.py").read_text())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("OPS", "UNSUPPORTED"):
            names += ast.literal_eval(node.value)
    return tuple(names)


# (c) refusal ---------------------------------------------------------------------------------------------


@pytest.mark.engine_venv
@pytest.mark.parametrize("value", [None, "0"])
def test_refuses_without_cpu_engine(value: str | None) -> None:
    env = {} if value is None else {"SGLANG_USE_CPU_ENGINE": value}
    out = run_sgl(
        """
        try:
            import sgl_kernel  # noqa: F401
        except ImportError as e:
            print("refused:", e)
        else:
            raise AssertionError("stand-in loaded without SGLANG_USE_CPU_ENGINE=1")
    """,
        env=env,
        cpu_engine=False,
    )
    assert out.startswith("refused:") and "SGLANG_USE_CPU_ENGINE" in out


@pytest.mark.engine_venv
def test_refuses_when_cuda_is_available() -> None:
    out = run_sgl("""
        import torch
        torch.cuda.is_available = lambda: True   # pretend to be on a GPU machine
        try:
            import sgl_kernel  # noqa: F401
        except ImportError as e:
            print("refused:", e)
        else:
            raise AssertionError("stand-in loaded with CUDA available")
    """)
    assert out.startswith("refused:") and "CUDA" in out
