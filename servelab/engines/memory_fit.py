"""Will this launch fit on this GPU? Each engine's own memory rule, checked without the GPU.

A launch argv (`servelab.engines.launch.command(...).argv`, or as typed) and a GPU class (data/gpu_classes.toml)
give the weights (parameters x dtype bytes, a draft's too), KV bytes per token (data/model_shapes.toml) and the
share of memory each engine gives them. SGLang: its own server-args resolution runs in its venv
(engine_side/sgl_memory_plan.py) with the GPU's capacity faked where SGLang reads it, so `mem_fraction_static` is
the command's or SGLang's own pick on that GPU. vLLM: its rule as arithmetic; what its profiling run measures
(activation peak, CUDA graphs, non-torch memory) needs a GPU, so VLLM_RESERVE_GIB stands in, reported as an
estimate. RULES names the engine files and functions each rule comes from.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.engines import flags
from servelab.engines.engine_side import script
from servelab.machine import datafiles, engine_envs, model_shapes, profiles
from servelab.machine.model_shapes import GIB

DATA_FILE = "gpu_classes.toml"
MIB = 2**20
# Estimates. nvidia-smi's total (gpu_classes.toml) minus the CUDA runtime's, which vLLM reads (vllm/utils/
# mem_utils.py, MemorySnapshot.measure): published vLLM logs show 0.3-0.9 GiB. The CUDA context and communicators,
# held before weights load; both engines measure free memory after them (vLLM's request_memory, SGLang's
# pre_model_load_memory).
CUDA_TOTAL_GAP_MIB, CUDA_CONTEXT_MIB = 1024, 512
# Estimate of what vLLM's profiling run finds besides weights. Published vLLM logs for 7-8B models show activation
# peaks of 1.2-1.5 GiB and non-torch memory of 0.1-0.4 GiB; CUDA graphs take ~0.5 GiB more. 2.5 GiB covers dense
# models up to ~15B at the profiles' batch sizes; MoE or tensor-parallel runs need far more.
VLLM_RESERVE_GIB = 2.5
VLLM_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py)
VLLM_DEFAULT_UTILIZATION = 0.92  # CacheConfig.gpu_memory_utilization's default (vllm/config/cache.py)
_KEYS = ("name", "memory_mib", "profiles")
_VLLM_CHECK = "vllm/v1/core/kv_cache_utils.py::check_enough_kv_cache_memory"
RULES = {
    "vllm": "vllm/v1/worker/gpu_worker.py::determine_available_memory gives the KV cache gpu_memory_utilization x "
            f"total less weights, activation peak, CUDA graphs and non-torch memory, and {_VLLM_CHECK} refuses to "
            "start when that cannot hold one --max-model-len request",
    "vllm-bytes": "vllm/v1/worker/gpu_worker.py::determine_available_memory takes --kv-cache-memory-bytes as the KV "
                  "size without gpu_memory_utilization, so weights, that KV, activations and CUDA graphs must fit the "
                  f"free memory, and {_VLLM_CHECK} still needs one --max-model-len request",
    "sglang": "sglang/srt/arg_groups/memory_hook.py::handle_gpu_memory_settings defines mem_fraction_static as "
              "(weights + KV pool) / capacity, and sglang/srt/mem_cache/kv_cache_configurator.py::"
              "_profile_available_bytes gives the pool what that share of free memory leaves after all weights",
}


class BadGpuClass(ValueError):
    pass


@dataclass(frozen=True)
class GpuClass:
    key: str  # the table's name in gpu_classes.toml, e.g. "l4"
    name: str  # as nvidia-smi names it
    memory_mib: int  # nvidia-smi's memory.total
    profiles: tuple[str, ...]  # the servelab profiles it serves


@dataclass(frozen=True)
class MemoryFit:
    engine: str
    gpu: str
    capacity_gib: float  # the total the engine reads: vLLM the CUDA runtime's (estimated), SGLang nvidia-smi's
    weights_gib: float  # target + draft
    kv_gib: float  # the KV cache: the size the command fixes, else what the budget leaves for it
    min_kv_gib: float  # one full-length (--max-model-len / --context-length) sequence
    reserve_gib: float  # activations and CUDA graphs
    reserve_source: str  # whose figure reserve_gib is: the engine's own, or our estimate
    budget_gib: float  # what weights and KV (for vLLM also the reserve) must fit in
    fraction: float | None  # the budget's share of memory; None where the rule uses none
    engine_fraction: float | None  # SGLang: the mem_fraction_static it picks itself on this GPU
    fits: bool
    headroom_gib: float  # budget left once weights, the KV the rule needs (and vLLM's reserve) are in
    rule: str
    problem: str  # one line, "" when it fits
    note: str = ""


def parse_gpu_classes(data: dict, known_profiles: Sequence[str]) -> list[GpuClass]:
    """The GPU classes of a loaded table, validated (BadGpuClass names file, key, value and what is accepted)."""
    out = []
    for key, raw in data.items():
        where = f"{DATA_FILE}: [{key}]"
        if not isinstance(raw, dict):
            raise BadGpuClass(f"{where} is {raw!r}; accepted: a table with {', '.join(_KEYS)}")
        if extra := sorted(set(raw) - set(_KEYS)):
            raise BadGpuClass(f"{where}: unknown key {extra[0]!r}; accepted: {', '.join(_KEYS)}")
        name, mib, served = raw.get("name"), raw.get("memory_mib"), raw.get("profiles")
        if not isinstance(name, str) or not name:
            raise BadGpuClass(f"{where}: name is {name!r}; accepted: the GPU's name as nvidia-smi shows it")
        if isinstance(mib, bool) or not isinstance(mib, int) or mib <= 0:
            raise BadGpuClass(f"{where}: memory_mib is {mib!r}; accepted: an integer number of MiB > 0")
        if not isinstance(served, list) or not served or any(p not in known_profiles for p in served):
            raise BadGpuClass(f"{where}: profiles is {served!r}; accepted: a non-empty list of profile names "
                              f"({', '.join(known_profiles)})")
        out.append(GpuClass(key, name, mib, tuple(served)))
    if not out:
        raise BadGpuClass(f"{DATA_FILE}: no GPU classes; accepted: at least one table")
    return out


def gpu_classes(profile_name: str | None = None, folder: Path | None = None) -> list[GpuClass]:
    """Every GPU class, or those that serve `profile_name` (a profile without a GPU has none)."""
    known = profiles.names()
    classes = parse_gpu_classes(datafiles.load(DATA_FILE, folder), known)
    if profile_name is not None and profile_name not in known:
        raise ValueError(f"unknown profile {profile_name!r}; accepted: {', '.join(known)}")
    return [g for g in classes if profile_name is None or profile_name in g.profiles]


def _text(args: Sequence[str], *names: str) -> str | None:
    """The last value given to any of `names` (`--x v` or `--x=v`), as the engines' parsers take it."""
    found = None
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            found = args[i + 1]
        elif "=" in arg and arg.split("=", 1)[0] in names:
            found = arg.split("=", 1)[1]
    return found


def _int(args: Sequence[str], name: str) -> int | None:
    text = _text(args, name)
    if text is not None and not text.isdigit():
        raise ValueError(f"{name} {text!r}: memory_fit reads only a plain integer")
    return None if text is None else int(text)


@dataclass(frozen=True)
class _Launch:
    weights: int  # bytes, target + draft
    kv_per_token: int  # bytes, as the engine sizes its pool (a draft's KV included)
    length: int  # --max-model-len / --context-length, else the model's
    fraction: float | None  # --gpu-memory-utilization / --mem-fraction-static
    kv_bytes: int | None  # vLLM --kv-cache-memory-bytes
    kv_tokens: int | None  # SGLang --max-total-tokens


def _launch(engine: str, argv: Sequence[str], weights_bytes: int | None) -> _Launch:
    args, vllm = flags.normalise(engine, argv).args, engine == "vllm"
    positional = args[0] if args and not args[0].startswith("-") else None
    model = (positional or _text(args, "--model")) if vllm else (_text(args, "--model-path", "--model") or positional)
    tp = _text(args, "--tensor-parallel-size", "-tp") if vllm else _text(args, "--tp-size", "--tensor-parallel-size")
    draft_id = (json.loads(_text(args, "--speculative-config") or "{}").get("model") if vllm
                else _text(args, "--speculative-draft-model-path"))
    if tp not in (None, "1") or not model:
        raise ValueError(f"memory_fit checks one model on one GPU; got model {model!r}, tensor parallel size {tp}")
    dtype = _text(args, "--dtype") or "auto"
    dtype = "bfloat16" if dtype == "auto" else dtype  # auto keeps the checkpoint's dtype: bf16 for these models
    kv_dtype = _text(args, "--kv-cache-dtype") or "auto"
    kv_dtype = dtype if kv_dtype == "auto" else "fp8" if kv_dtype.startswith("fp8") else kv_dtype
    shape = model_shapes.served_model_shape(model)
    draft = model_shapes.served_model_shape(draft_id) if draft_id else None
    for s, given in ((shape, weights_bytes), (draft, None)):
        if s is not None and given is None and s.params_b <= 0:
            raise ValueError(f"no parameter count for {s.name!r}: add params_b to model_shapes.toml, or pass "
                             "weights_bytes")
    width = model_shapes.dtype_bytes(dtype)
    weights = weights_bytes if weights_bytes is not None else round(shape.params_b * 1e9 * width)
    kv = model_shapes.kv_bytes_per_token(shape, kv_dtype)
    if draft is not None:
        weights += round(draft.params_b * 1e9 * width)
        # vLLM: the draft's attention layers get their own KV cache, in the specs check_enough_kv_cache_memory
        # sums. SGLang sizes a STANDALONE/EAGLE draft pool with the target's per-layer KV size times the draft's
        # layers (sglang/srt/model_executor/pool_configurator.py, DefaultPoolConfigurator.__init__).
        kv += (model_shapes.kv_bytes_per_token(draft, kv_dtype) if vllm
               else kv * draft.num_hidden_layers // shape.num_hidden_layers)
    fraction = _text(args, "--gpu-memory-utilization" if vllm else "--mem-fraction-static")
    return _Launch(weights, kv, _int(args, "--max-model-len" if vllm else "--context-length")
                   or shape.max_position_embeddings, None if fraction is None else float(fraction),
                   _int(args, "--kv-cache-memory-bytes"), _int(args, "--max-total-tokens"))


def _where(gpu: GpuClass) -> str:
    return f"{', '.join(gpu.profiles)} on {gpu.name}"


def _vllm(launch: _Launch, gpu: GpuClass) -> MemoryFit:
    capacity = (gpu.memory_mib - CUDA_TOTAL_GAP_MIB) * MIB
    free = capacity - CUDA_CONTEXT_MIB * MIB
    # One --max-model-len request in whole blocks, plus the null block the pool holds back.
    min_kv = (math.ceil(launch.length / VLLM_BLOCK_SIZE) + 1) * VLLM_BLOCK_SIZE * launch.kv_per_token
    w, reserve, utilization = launch.weights, VLLM_RESERVE_GIB * GIB, launch.fraction or VLLM_DEFAULT_UTILIZATION
    requested = math.ceil(capacity * utilization)  # request_memory: checked at start-up in either mode
    if launch.kv_bytes is not None:
        kv = need = launch.kv_bytes
        budget, fraction, rule = free, None, RULES["vllm-bytes"]
        over = f"{free / GIB:.1f} GiB free at start of {capacity / GIB:.1f} GiB"
    else:
        budget, fraction, need, rule = requested, utilization, min_kv, RULES["vllm"]
        kv, over = max(0, budget - w - reserve), f"{utilization:.2f} x {capacity / GIB:.1f} GiB"
    headroom, problem = budget - w - reserve - need, ""
    if free < requested:
        problem = (f"{_where(gpu)}: vLLM refuses to start: {free / GIB:.1f} GiB free at start < gpu_memory_utilization"
                   f" {utilization:.2f} x {capacity / GIB:.1f} GiB (vllm/v1/worker/utils.py::request_memory)")
    elif headroom < 0:
        problem = (f"{_where(gpu)}: vLLM needs {w / GIB:.1f} GiB weights + {need / GIB:.1f} GiB KV + "
                   f"{reserve / GIB:.1f} GiB reserve > {budget / GIB:.1f} GiB ({over})")
    elif kv < min_kv:
        problem = (f"{_where(gpu)}: vLLM refuses to start: {kv / GIB:.2f} GiB of KV cache cannot hold one "
                   f"{launch.length}-token request ({min_kv / GIB:.2f} GiB; {_VLLM_CHECK})")
    return MemoryFit("vllm", gpu.name, capacity / GIB, w / GIB, kv / GIB, min_kv / GIB, reserve / GIB,
                     "our estimate (VLLM_RESERVE_GIB); vLLM measures it in a profiling run on the GPU", budget / GIB,
                     fraction, None, not problem, headroom / GIB, rule, problem,
                     f"total = nvidia-smi's {gpu.memory_mib} MiB - CUDA_TOTAL_GAP_MIB (an estimate)")


def _sglang(launch: _Launch, gpu: GpuClass, plan: dict) -> MemoryFit:
    capacity = gpu.memory_mib * MIB
    free = capacity - (CUDA_TOTAL_GAP_MIB + CUDA_CONTEXT_MIB) * MIB  # pre_model_load_memory, estimated
    resolved, own = plan.get("resolved") or {}, plan.get("own_mem_fraction_static")
    fraction = float(resolved.get("mem_fraction_static") or launch.fraction or own or 0.0)
    length = int(resolved.get("context_length") or launch.length)
    tokens = resolved.get("max_total_tokens") or launch.kv_tokens
    w, budget, min_kv = launch.weights, fraction * free, length * launch.kv_per_token
    kv = tokens * launch.kv_per_token if tokens else max(0.0, budget - w)
    headroom = budget - w - (kv if tokens else min_kv)
    reserve = (1 - (own or fraction)) * capacity  # handle_gpu_memory_settings' reserved_mem, as its fraction says
    note = f"free at start = nvidia-smi's {gpu.memory_mib} MiB - CUDA_TOTAL_GAP_MIB - CUDA_CONTEXT_MIB (estimates)"
    if own and fraction > own:
        note += (f"; --mem-fraction-static {fraction} leaves {(1 - fraction) * capacity / GIB:.1f} GiB for "
                 f"activations and CUDA graphs where SGLang's own heuristic reserves {reserve / GIB:.1f} GiB on this "
                 f"GPU (it would pick {own})")
    problem = ""
    if not plan.get("ok"):
        problem = f"{_where(gpu)}: SGLang refuses these arguments: {plan.get('error', '')}"
    elif headroom < 0:
        what = f"{kv / GIB:.1f} GiB KV" if tokens else f"{min_kv / GIB:.1f} GiB KV (one {length}-token sequence)"
        problem = (f"{_where(gpu)}: SGLang needs {w / GIB:.1f} GiB weights + {what} > {budget / GIB:.1f} GiB "
                   f"({fraction:.3f} x {free / GIB:.1f} GiB free at start)")
        if tokens and budget > w:
            problem += f"; it would cap the pool at {int((budget - w) // launch.kv_per_token)} tokens"
    return MemoryFit("sglang", gpu.name, capacity / GIB, w / GIB, kv / GIB, min_kv / GIB, reserve / GIB,
                     "SGLang's own (memory_hook.py::handle_gpu_memory_settings, reserved_mem)", budget / GIB,
                     fraction, own, not problem, headroom / GIB, RULES["sglang"], problem, note)


def judge(engine: str, argv: Sequence[str], gpu: GpuClass, *, plan: dict | None = None,
          weights_bytes: int | None = None) -> MemoryFit:
    """The engine's rule, no subprocess: SGLang's needs its resolution `plan` (a result of sgl_memory_plan.py)."""
    if engine == "sglang" and plan is None:
        raise ValueError("SGLang's rule needs its resolution plan (sgl_memory_plan.py); use fit or fit_many")
    launch = _launch(engine, argv, weights_bytes)
    return _vllm(launch, gpu) if engine == "vllm" else _sglang(launch, gpu, plan or {})


def fit(engine: str, argv: Sequence[str], gpu: GpuClass, *, weights_bytes: int | None = None) -> MemoryFit:
    """Whether the launch `argv` of `engine` fits on `gpu` by that engine's rule (SGLang: one engine-venv run)."""
    return fit_many([(engine, argv, gpu, weights_bytes)])[0]


FitItem = tuple[str, Sequence[str], GpuClass] | tuple[str, Sequence[str], GpuClass, int | None]


def fit_many(items: Iterable[FitItem], *, env_name: str | None = None, timeout: float = 300) -> list[MemoryFit]:
    """`fit` for (engine, argv, gpu[, weights_bytes]) items, in order; every SGLang item in one venv subprocess."""
    items = list(items)
    launches = [_launch(item[0], item[1], item[3] if len(item) > 3 else None) for item in items]  # fail early
    sglang = [i for i, item in enumerate(items) if item[0] == "sglang"]
    plans = _sglang_plans([(items[i][1], items[i][2]) for i in sglang], env_name, timeout) if sglang else []
    by_index = dict(zip(sglang, plans, strict=True))
    return [_sglang(launch, item[2], by_index[i]) if i in by_index else _vllm(launch, item[2])
            for i, (item, launch) in enumerate(zip(items, launches, strict=True))]


def _sglang_plans(commands: list[tuple[Sequence[str], GpuClass]], env_name: str | None, timeout: float) -> list[dict]:
    """SGLang's resolution of each command on its GPU (engine_side/sgl_memory_plan.py); hub ids get the flag
    checks' config-only stand-ins (flags._engine_environment)."""
    python = engine_envs.parser_env("sglang", env_name).python  # the CPU and CUDA builds resolve alike
    parsed = [flags.normalise("sglang", argv) for argv, _ in commands]
    with tempfile.TemporaryDirectory(prefix="servelab-memfit-") as tmp:
        env, notes = flags._engine_environment("sglang", parsed, Path(tmp))
        request = {"commands": [{"label": str(i), "args": list(c.args), "gpu_mib": g.memory_mib}
                                for i, (c, (_, g)) in enumerate(zip(parsed, commands, strict=True))]}
        answer = engine_envs.run_script(python, script("sgl_memory_plan.py"), stdin=json.dumps(request), env=env,
                                        cwd=tmp, timeout=timeout)
    for plan, note in zip(answer["results"], notes, strict=True):
        if not plan["ok"] and note:
            plan["error"] += f" ({'; '.join(note)})"
    return answer["results"]
