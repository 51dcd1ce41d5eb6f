"""Hardware profiles (data in data/profiles.toml), validated when loaded, and detection of the one that fits.

Every key of a profile is checked against the schema below: an unknown key (a typo such as
`kv_cache_gb`), a missing one, a value of the wrong type or out of range is one error line naming
the file, the profile, the key, the bad value and what is accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from servelab.machine import datafiles, hardware
from servelab.machine.paths import DATA

PROFILES_FILE = DATA / "profiles.toml"
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
SPECULATIVE_ENGINES = ("vllm", "sglang")
OPTIONAL = ("kv_cache_tokens", "gpu_memory_utilization", "min_gpu_gib")


class UnknownProfile(ValueError):
    pass


class BadProfile(ValueError):
    pass


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    device: str
    dtype: str
    model: str
    draft_model: str
    max_model_len: int
    max_num_seqs: int
    chunk_sizes: list[int]
    vllm_env: str
    sglang_env: str
    vllm_flags: list[str]
    sglang_flags: list[str]
    speculative: dict[str, dict[str, Any]]
    # The KV budget, in tokens, the one unit from here to the engine flag (servelab.engines.launch
    # converts it, in one place). None: the engine sizes its cache from gpu_memory_utilization.
    kv_cache_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    min_gpu_gib: float = 0.0

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    def engine_env(self, engine: str) -> str:
        return {"vllm": self.vllm_env, "sglang": self.sglang_env}[engine]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _known_env(engine: str) -> tuple[str, Callable[[object], bool]]:
    def check(v: object) -> bool:
        from servelab.machine import engine_envs

        return isinstance(v, str) and v in engine_envs.names() and engine_envs.get(v).engine == engine
    return f"the name of a {engine} env in servelab/data/engine_envs.toml", check


# key -> (what is accepted, in words; a check that is True for a good value)
SCHEMA: dict[str, tuple[str, Callable[[object], bool]]] = {
    "summary": ("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip())),
    "device": (f"one of {', '.join(DEVICES)}", lambda v: v in DEVICES),
    "dtype": (f"one of {', '.join(DTYPES)}", lambda v: v in DTYPES),
    "model": ("a hub id or local:NAME", lambda v: isinstance(v, str) and bool(v.strip())),
    "draft_model": ("a hub id, local:NAME or \"\" for none", lambda v: isinstance(v, str)),
    "max_model_len": ("an integer >= 16 (tokens)", lambda v: _is_int(v) and v >= 16),
    "max_num_seqs": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "chunk_sizes": ("a non-empty, ascending list of integers >= 1 (tokens)",
                    lambda v: isinstance(v, list) and bool(v) and all(_is_int(x) and x >= 1 for x in v)
                    and v == sorted(set(v))),
    "vllm_env": _known_env("vllm"),
    "sglang_env": _known_env("sglang"),
    "vllm_flags": ("a list of strings", _str_list),
    "sglang_flags": ("a list of strings", _str_list),
    "speculative": (f"a table with keys among {', '.join(SPECULATIVE_ENGINES)}, each a table",
                    lambda v: isinstance(v, dict) and set(v) <= set(SPECULATIVE_ENGINES)
                    and all(isinstance(x, dict) for x in v.values())),
    "kv_cache_tokens": ("an integer >= 1 (tokens of KV cache)", lambda v: _is_int(v) and v >= 1),
    "gpu_memory_utilization": ("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1),
    "min_gpu_gib": ("a number >= 0 (GiB)", lambda v: _is_number(v) and v >= 0),
}


def _table(path: Path | None = None) -> dict[str, dict[str, Any]]:
    path = path or PROFILES_FILE
    return datafiles.load(path.name, path.parent)


def names() -> list[str]:
    return list(_table())


def validate(name: str, raw: dict[str, Any], path: Path | None = None) -> Profile:
    """`raw` (one profile's table) as a Profile, or a BadProfile naming file, profile, key, value and what fits."""
    where = f"{path or PROFILES_FILE}: profile [{name}]"
    for key, value in raw.items():
        if key not in SCHEMA:
            raise BadProfile(f"{where}: unknown key {key!r} = {value!r}; accepted keys: {', '.join(SCHEMA)}")
        accepted, check = SCHEMA[key]
        if not check(value):
            raise BadProfile(f"{where}: {key} = {value!r} is not accepted; expected {accepted}")
    missing = [k for k in SCHEMA if k not in raw and k not in OPTIONAL]
    if missing:
        raise BadProfile(f"{where}: missing key {missing[0]!r}; expected {SCHEMA[missing[0]][0]}")
    if raw["device"] == "cpu" and "gpu_memory_utilization" in raw:
        raise BadProfile(f"{where}: gpu_memory_utilization = {raw['gpu_memory_utilization']!r} on a cpu profile; "
                         "size the KV cache with kv_cache_tokens")
    known = {f.name for f in fields(Profile)}
    return Profile(name=name, **{k: v for k, v in raw.items() if k in known})


def load(name: str = "auto", path: Path | None = None) -> Profile:
    """The profile called `name`, validated; "auto" detects the hardware (see `detect`)."""
    table = _table(path)
    if name == "auto":
        name = detect(table=table)
    if name not in table:
        raise UnknownProfile(f"unknown profile {name!r}; valid profiles: auto, {', '.join(table)}")
    return validate(name, table[name], path)


def detect(gpus_gib: list[float] | None = None, table: dict[str, dict[str, Any]] | None = None) -> str:
    """Pick the largest GPU profile whose memory floor the first GPU meets, else `cpu`."""
    gpus = [g.memory_gib for g in hardware.gpus()] if gpus_gib is None else gpus_gib
    if not gpus:
        return "cpu"
    fitting = [(p.get("min_gpu_gib", 0), n) for n, p in (table or _table()).items()
               if p["device"] == "cuda" and gpus[0] >= p.get("min_gpu_gib", 0)]
    return max(fitting)[1] if fitting else "cpu"
