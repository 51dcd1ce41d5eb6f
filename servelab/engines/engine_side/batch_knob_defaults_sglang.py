"""SGLang's knobs that bound a batch, from its own argument classes and resolution code.

Runs inside the SGLang venv and imports nothing from servelab. Prints one JSON object with, for each of
`max_running_requests`, `max_prefill_tokens` and `chunked_prefill_size`: the `ServerArgs` field default
and the class that declares it (`field`), and the value SGLang's own resolution gives when the flag is not
passed (`default`) with what resolved it (`resolved by`, null when the field default stands).

* `chunked_prefill_size` and `max_prefill_tokens`: `ServerArgs(model_path, device, ...)` resolved by
  `ServerArgs.resolve_once` (which reads the model's config.json and the device's memory); the source
  that declared the value is SGLang's own record of its resolution (`_resolved_overrides`).
* `max_running_requests`: left unset, SGLang derives it only at start, from the KV pool's token capacity
  (`KVCacheConfigurator.resolve_max_num_reqs`). Given TOKEN_CAPACITY (the pool a server of the profile
  gets), the script calls that method with a stand-in for the configurator (the model's context length,
  attention-DP size 1, no mamba state) and for its schedule config (no `max_running_requests` given), the
  only things the method reads for a plain attention model; without one the value is null.

Usage: python batch_knob_defaults_sglang.py MODEL_PATH DEVICE CONTEXT_LENGTH TOKEN_CAPACITY|none [key=value ...]
(CONTEXT_LENGTH: the --context-length the servers get; key=value: more ServerArgs fields, as strings)
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

KNOBS = ("max_running_requests", "max_prefill_tokens", "chunked_prefill_size")


def where(obj: object) -> str:
    """`sglang/.../file.py, Qualified.name` of a function or class."""
    import sglang

    path = Path(inspect.getsourcefile(obj)).relative_to(Path(sglang.__file__).parent.parent)
    return f"{path.as_posix()}, {obj.__qualname__}"


def running_requests_default(token_capacity: int, context_len: int) -> int:
    """What `KVCacheConfigurator.resolve_max_num_reqs` returns for a pool of `token_capacity` tokens when no
    --max-running-requests is given."""
    from sglang.srt.mem_cache import kv_cache_configurator as kvc

    configurator = SimpleNamespace(model_config=SimpleNamespace(context_len=context_len), attn_dp_size=1,
                                   mambaish_config=None)
    with mock.patch.object(kvc, "get_schedule", lambda: SimpleNamespace(max_running_requests=None)):
        return int(kvc.KVCacheConfigurator.resolve_max_num_reqs(configurator, token_capacity))


def main(model_path: str, device: str, context_length: int, token_capacity: int | None, extra: dict[str, str]) -> dict:
    import sglang
    from sglang.srt.arg_groups.fields.schedule import Schedule
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_path, device=device, context_length=context_length, **extra)
    fields = {k: getattr(args, k) for k in KNOBS}
    args.resolve_once()
    declared = {k: src for src, values in getattr(args, "_resolved_overrides", None) or () for k in values}
    context_len = int(resolution_result(args, "context_length"))
    knobs = {k: {"field default": fields[k], "default": resolution_result(args, k), "field": where(Schedule),
                 "resolved by": f"ServerArgs.resolve_once ({declared[k]})" if k in declared else None} for k in KNOBS}
    knobs["max_running_requests"].update(
        default=running_requests_default(token_capacity, context_len) if token_capacity else None,
        **{"resolved by": where(KVCacheConfigurator.resolve_max_num_reqs)})
    return {"version": sglang.__version__, "device": device, "token_capacity": token_capacity,
            "context_len": context_len, "knobs": knobs}


if __name__ == "__main__":
    if len(sys.argv) < 5:
        raise SystemExit("usage: batch_knob_defaults_sglang.py MODEL_PATH DEVICE CONTEXT_LENGTH TOKEN_CAPACITY|none "
                         "[key=value ...]")
    capacity = None if sys.argv[4] == "none" else int(sys.argv[4])
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), capacity,
                          dict(a.split("=", 1) for a in sys.argv[5:]))))
