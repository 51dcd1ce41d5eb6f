"""vLLM's knobs that bound a batch, `max_num_seqs` and `max_num_batched_tokens`, from its own config code.

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object: for each knob its
`EngineArgs` field default (None: vLLM picks one per platform), the default `vllm serve` gets on this
machine's platform (`EngineArgs.get_batch_defaults(world_size=1)` for the OpenAI API server, else
`SchedulerConfig`'s class default, as `EngineArgs._set_default_max_num_seqs_and_batched_tokens_args` does),
and where each was read; the `performance_mode` default (its "throughput" mode would double both); and the
same defaults on stand-in CUDA devices (`cuda_by_device`, from vllm_scheduler_defaults.py beside this script).

Usage: python batch_knob_defaults_vllm.py
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

from vllm_scheduler_defaults import CUDA_DEVICES, batch_defaults_on  # beside this script (run by path)

KNOBS = ("max_num_seqs", "max_num_batched_tokens")


def where(obj: object) -> str:
    """`vllm/.../file.py, Qualified.name` of a function or class."""
    import vllm

    path = Path(inspect.getsourcefile(obj)).relative_to(Path(vllm.__file__).parent.parent)
    return f"{path.as_posix()}, {obj.__qualname__}"


def serve_defaults(batch_defaults: tuple[dict, dict]) -> dict[str, int]:
    """Both knobs for `vllm serve` from `get_batch_defaults`' answer (max_num_batched_tokens, max_num_seqs by
    usage context), with `SchedulerConfig`'s class defaults where the answer has no API-server entry."""
    from vllm.config import SchedulerConfig
    from vllm.usage.usage_lib import UsageContext

    tokens, seqs = batch_defaults
    return {"max_num_seqs": seqs.get(UsageContext.OPENAI_API_SERVER, SchedulerConfig.DEFAULT_MAX_NUM_SEQS),
            "max_num_batched_tokens": tokens.get(UsageContext.OPENAI_API_SERVER,
                                                 SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS)}


def main() -> dict:
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    fields = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
    here = serve_defaults(EngineArgs.get_batch_defaults(world_size=1))
    knobs = {k: {"field default": fields[k], "default": here[k], "field": where(EngineArgs),
                 "resolved by": where(EngineArgs.get_batch_defaults)} for k in KNOBS}
    cuda = {label: serve_defaults(batch_defaults_on(gib, name)) for label, gib, name in CUDA_DEVICES}
    return {"version": vllm.__version__, "platform": type(current_platform).__name__, "knobs": knobs,
            "EngineArgs.performance_mode": fields["performance_mode"], "cuda_by_device": cuda}


if __name__ == "__main__":
    print(json.dumps(main()))
