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

from vllm_scheduler_defaults import CUDA_DEVICES, batch_defaults_on  # beside this script

SERVE_DEVICES = ("24 GiB (L4-class)", "80 GiB H100", "141 GiB H200")  # labels of CUDA_DEVICES reported here


def first_sentence(text: str | None) -> str:
    return " ".join((text or "").split()).split(". ")[0].rstrip(".") + "."


def main() -> dict:
    import vllm
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig
    from vllm.config.utils import get_attr_docs
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
        if label in SERVE_DEVICES:
            _, num_seqs = batch_defaults_on(gib, name)
            seqs[label] = num_seqs.get(UsageContext.OPENAI_API_SERVER)
    return {"version": vllm.__version__, "fields": fields,
            "request_memory_is_total_times_fraction":
                "init_snapshot.total_memory * cache_config.gpu_memory_utilization" in source,
            "serve_max_num_seqs_by_cuda_device": seqs}


if __name__ == "__main__":
    print(json.dumps(main()))
