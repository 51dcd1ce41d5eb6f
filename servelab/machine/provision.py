"""Set up everything a profile needs: engine venvs and models. Idempotent; reruns reuse what is valid."""

from __future__ import annotations

import time

from servelab.machine import engine_envs, models, profiles


def setup(profile_name: str = "auto", *, engines: tuple[str, ...] = ("vllm", "sglang")) -> profiles.Profile:
    profile = profiles.load(profile_name)
    print(f"[setup] profile {profile.name}: {profile.summary}", flush=True)
    t0 = time.monotonic()
    built = {engine: engine_envs.build(profile.engine_env(engine)) for engine in engines}
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
