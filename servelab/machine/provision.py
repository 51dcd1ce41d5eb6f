"""Set up everything a profile needs: engine venvs and models. Idempotent; reruns reuse what is valid."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from servelab.machine import engine_envs, models, profiles


def setup(profile_name: str = "auto", *, engines: tuple[str, ...] = ("vllm", "sglang")) -> profiles.Profile:
    profile = profiles.load(profile_name)
    print(f"[setup] profile {profile.name}: {profile.summary}", flush=True)
    t0 = time.monotonic()
    # Both venvs at once: most of a build is waiting on downloads and unpacking, and they share nothing.
    with ThreadPoolExecutor(max_workers=len(engines) or 1) as pool:
        built = dict(zip(engines, pool.map(lambda e: engine_envs.build(profile.engine_env(e)), engines), strict=True))
    for spec in (profile.model, profile.draft_model):
        if not spec:
            continue
        if spec.startswith("local:"):
            converter = built.get("vllm") or engine_envs.build(profile.vllm_env)
            models.prepare_local(spec.removeprefix("local:"), converter.python)
        else:
            models.check_hub(spec)
    print(f"[setup] done in {time.monotonic() - t0:.0f} s", flush=True)
    return profile
