"""What SGLang's memory and capacity flags default to and reserve, read from its own argument classes.

Runs inside the SGLang venv and imports nothing from servelab. Prints one JSON object: the defaults
and help texts of `mem_fraction_static`, `max_running_requests`, `max_total_tokens` and
`context_length` from the argument groups (`sglang/srt/arg_groups/fields/`), the sentence of
`sglang/srt/arg_groups/memory_hook.py::handle_gpu_memory_settings`'s docstring that defines what
`mem_fraction_static` covers, and whether its code holds the lines (CODE) that choose the default.
"""

from __future__ import annotations

import inspect
import json

FIELDS = (("schedule", "Schedule", "mem_fraction_static"), ("schedule", "Schedule", "max_running_requests"),
          ("schedule", "Schedule", "max_total_tokens"), ("model", "Model", "context_length"))


# Lines of handle_gpu_memory_settings that choose the default when mem_fraction_static is unset
# (whitespace-normalised; the answer says which of them the installed source contains).
CODE = ("reserved_mem = 512", "activation_tokens = max(cfg.chunked_prefill_size, 2048)",
        "reserved_mem += activation_tokens * 1.5", "reserved_mem += cfg.tp_size * cfg.pp_size / 8 * 1024",
        "reserved_mem += reserve_for_graph_mb(server_args)",
        "if gpu_mem is not None and gpu_mem > 60 * 1024: reserved_mem = max(reserved_mem, 10 * 1024)",
        "round((gpu_mem - reserved_mem) / gpu_mem, 3) if gpu_mem is not None else 0.95")


def main() -> dict:
    import importlib

    import msgspec
    import sglang
    from sglang.srt.arg_groups import memory_hook

    fields = {}
    for module, cls_name, name in FIELDS:
        cls = getattr(importlib.import_module(f"sglang.srt.arg_groups.fields.{module}"), cls_name)
        f = next(f for f in msgspec.structs.fields(cls) if f.name == name)
        meta = getattr(f.type, "__metadata__", ())
        helps = [m for m in meta if isinstance(m, str)] + [m.help for m in meta if getattr(m, "help", None)]
        text = " ".join((helps[0] if helps else "").split("\n\n")[0].split())
        fields[f"{cls_name}.{name}"] = {"default": f.default, "doc": text}
    doc = " ".join(inspect.getdoc(memory_hook.handle_gpu_memory_settings).split())
    start = doc.index("The argument mem_fraction_static is defined as")
    definition = doc[start:doc.index(".", doc.index("GPU memory capacity.", start)) + 1]
    source = " ".join(inspect.getsource(memory_hook.handle_gpu_memory_settings).split())
    return {"version": sglang.__version__, "fields": fields, "definition": definition,
            "code": {line: line in source for line in CODE}}


if __name__ == "__main__":
    print(json.dumps(main()))
