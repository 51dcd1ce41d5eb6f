"""Memory bandwidth of the device an engine computes on, measured with the engine's own torch.

Runs inside an engine venv and imports nothing from servelab. On a CUDA device it times `x.sum()` (read) and
`y.copy_(x)` (read + write) over a float32 tensor far larger than any cache, with `torch.cuda.synchronize()`
around each pass; on a CPU the same with torch's CPU kernels, which use torch's intra-op threads (as the
engine's CPU build does). Best of `repeats` passes. Prints one JSON object: device, its name, threads, bytes,
read and copy bandwidth in GB/s (copy counts bytes read plus bytes written, STREAM's convention).

Usage: python device_bandwidth.py [MIB] [REPEATS]   (default: 1024 MiB on CUDA, 512 on CPU; 5 passes)
"""

from __future__ import annotations

import json
import sys
import time


def best_seconds(fn, sync, repeats: int) -> float:
    fn()
    sync()  # the first pass pays allocation and kernel selection
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def main(mib: int | None, repeats: int) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    mib = mib or (1024 if cuda else 512)
    x = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    read = best_seconds(x.sum, sync, repeats)
    copy = best_seconds(lambda: y.copy_(x), sync, repeats)
    n = x.numel() * x.element_size()
    return {"device": device, "name": torch.cuda.get_device_name() if cuda else "cpu",
            "threads": torch.get_num_threads(), "bytes": n, "repeats": repeats,
            "read_gb_s": n / read / 1e9, "copy_gb_s": 2 * n / copy / 1e9, "torch": torch.__version__}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(int(a[0]) if a else None, int(a[1]) if len(a) > 1 else 5)))
