"""What vLLM's memory and capacity flags default to and reserve, read from its own config classes.

Runs inside the vLLM venv and imports nothing from servelab. Prints one JSON object: the field
defaults of `CacheConfig.gpu_memory_utilization`, `ModelConfig.max_model_len` and
`SchedulerConfig.max_num_seqs` with the first sentence of their docstrings, whether
`vllm/v1/worker/utils.py::request_memory` sizes the instance as total memory times the fraction,
and `EngineArgs.get_batch_defaults` (max_num_seqs for `vllm serve`) for stand-in CUDA devices of a
given memory and name (its branches depend only on those, and on `is_cpu` / `is_tpu`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json

GIB = 1 << 30
CUDA_DEVICES = (("24 GiB (L4-class)", 24, "nvidia l4"), ("80 GiB H100", 80, "nvidia h100 80gb hbm3"),
                ("141 GiB H200", 141, "nvidia h200"))


def first_sentence(text: str | None) -> str:
    return " ".join((text or "").split()).split(". ")[0].rstrip(".") + "."


def main() -> dict:
    from types import SimpleNamespace
    from unittest import mock

    import vllm
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig
    from vllm.config.utils import get_attr_docs
    from vllm.engine import arg_utils
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.worker import utils as worker_utils

    fields = {}
    for cls, name in ((CacheConfig, "gpu_memory_utilization"), (ModelConfig, "max_model_len"),
                      (SchedulerConfig, "max_num_seqs")):
        default = next(f.default for f in dataclasses.fields(cls) if f.name == name)
        default = getattr(default, "default", default)  # a pydantic Field's default
        fields[f"{cls.__name__}.{name}"] = {"default": default, "doc": first_sentence(get_attr_docs(cls).get(name))}
    source = " ".join(inspect.getsource(worker_utils.request_memory).split())
    seqs = {}
    for label, gib, name in CUDA_DEVICES:
        device = SimpleNamespace(get_device_total_memory=lambda gib=gib: gib * GIB,
                                 get_device_name=lambda name=name: name, is_cpu=lambda: False, is_tpu=lambda: False)
        with mock.patch.object(arg_utils, "current_platform", device):
            _, num_seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
        seqs[label] = num_seqs.get(UsageContext.OPENAI_API_SERVER)
    return {"version": vllm.__version__, "fields": fields,
            "request_memory_is_total_times_fraction":
                "init_snapshot.total_memory * cache_config.gpu_memory_utilization" in source,
            "serve_max_num_seqs_by_cuda_device": seqs}


if __name__ == "__main__":
    print(json.dumps(main()))
