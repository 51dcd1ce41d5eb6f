"""Set up everything a profile needs: engine venvs and models. Idempotent; reruns reuse what is valid.

On a GPU profile setup first checks what the machine must have (servelab.machine.gpu_checks: driver, Python,
disk), then builds the venvs, then downloads every hub model any chapter needs (the caller passes them, from
`python -m servelab plan`), so no engine start waits on a download.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from servelab.machine import engine_envs, gpu_checks, hub, models, profiles


class SetupProblem(RuntimeError):
    """What this machine lacks for the profile, one line each."""


def preflight(profile: profiles.Profile, hub_models: Sequence[str] = ()) -> list[str]:
    """The GPU profile's machine checks, one line per problem (none on the cpu profile): driver, Python, and disk
    for what is still to be built and downloaded."""
    if profile.is_cpu:
        return []
    found = [gpu_checks.driver_problem(profile), gpu_checks.python_problem()]
    return [line for line in found if line] + gpu_checks.missing_disk(profile, list(hub_models))


def download_models(model_ids: Sequence[str]) -> list[str]:
    """Every hub model downloaded now; a gated one without a token is named (its runs skip) and not fetched."""
    skipped = {m: reason for m in model_ids if (reason := hub.skip_reason([m]))}
    for model, reason in skipped.items():
        print(f"[setup] {model}: not downloaded: {reason}", flush=True)
    return hub.predownload([m for m in model_ids if m not in skipped])


def setup(profile_name: str = "auto", *, engines: tuple[str, ...] = ("vllm", "sglang"),
          hub_models: Sequence[str] = ()) -> profiles.Profile:
    """Set up `profile_name`; `hub_models`: every hub model the chapters start (`python -m servelab plan`), which a
    GPU profile downloads before any engine starts."""
    profile = profiles.load(profile_name)
    print(f"[setup] profile {profile.name}: {profile.summary}", flush=True)
    if problems := preflight(profile, hub_models):
        raise SetupProblem("\n".join(problems))
    t0 = time.monotonic()
    # Both venvs at once: most of a build is waiting on downloads and unpacking, and they share nothing.
    with ThreadPoolExecutor(max_workers=len(engines) or 1) as pool:
        built = dict(zip(engines, pool.map(lambda e: engine_envs.build(profile.engine_env(e)), engines), strict=True))
    for spec in (profile.model, profile.draft_model):
        if spec.startswith("local:"):
            converter = built.get("vllm") or engine_envs.build(profile.vllm_env)
            models.prepare_local(spec.removeprefix("local:"), converter.python)
    wanted = list(dict.fromkeys([*(m for m in (profile.model, profile.draft_model) if m and ":" not in m),
                                 *hub_models]))
    if problems := download_models(wanted) + gpu_checks.shape_problems(wanted, models.hub_cache()):
        raise SetupProblem("\n".join(problems))
    print(f"[setup] done in {time.monotonic() - t0:.0f} s", flush=True)
    return profile
