"""SGLang's resolved chunked-prefill settings for a model and device, from its own argument resolution.

Runs inside the SGLang venv and imports nothing from servelab. Builds `ServerArgs(model_path, device)`,
runs SGLang's resolution pipeline (`resolve_once`, which reads the model's config.json and the
device's memory) and prints one JSON object: the `chunked_prefill_size` SGLang resolves when none is
given (`resolution_result`), the raw field defaults of `chunked_prefill_size` and `enable_mixed_chunk`,
`max_prefill_tokens`, and the device memory (MiB) that the default is derived from.

Usage: python sglang_chunk_defaults.py MODEL_PATH DEVICE [EXTRA SERVER ARGS as key=value ...]
"""

from __future__ import annotations

import json
import sys


def main(model_path: str, device: str, extra: dict[str, str]) -> dict:
    import sglang
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.common import get_device_memory_capacity

    args = ServerArgs(model_path=model_path, device=device, **extra)
    raw = {"chunked_prefill_size": args.chunked_prefill_size, "enable_mixed_chunk": args.enable_mixed_chunk}
    args.resolve_once()
    return {"version": sglang.__version__, "device": device,
            "device_memory_mib": get_device_memory_capacity(device),
            "field default chunked_prefill_size": raw["chunked_prefill_size"],
            "field default enable_mixed_chunk": raw["enable_mixed_chunk"],
            "resolved chunked_prefill_size": resolution_result(args, "chunked_prefill_size"),
            "resolved max_prefill_tokens": resolution_result(args, "max_prefill_tokens"),
            "resolved enable_mixed_chunk": resolution_result(args, "enable_mixed_chunk")}


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: sglang_chunk_defaults.py MODEL_PATH DEVICE [key=value ...]")
    print(json.dumps(main(sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:]))))
