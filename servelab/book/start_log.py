"""The engine starts of a test run: `servelab.engines.server` notes each one in the file SERVELAB_START_LOG names
(one JSON line: engine, who started it, its argv); this reads such files and counts them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from servelab.machine import engine_envs, profiles


def start_summary(logs: Iterable[Path]) -> str:
    """The engine starts noted in `logs`: the real engines' (the cpu profile's venvs), by engine and by who started
    them (test file or chapter), and apart from them the lifecycle tests' stand-in engine's."""
    noted = []
    for log in logs:
        with open(log) as f:
            noted += [json.loads(line) for line in f if line.strip()]
    envs = str(engine_envs.get(profiles.load("cpu").vllm_env).path.parent)
    starts = [s for s in noted if s["argv"][0].startswith(envs)]
    by_engine = Counter(s["engine"] for s in starts)
    by_who = Counter(s["by"].split("::")[0] for s in starts)
    engines = ", ".join(f"{e} {n}" for e, n in sorted(by_engine.items())) or "none"
    return (f"engine starts: {len(starts)} real ({engines}), {len(noted) - len(starts)} of the lifecycle tests' "
            "stand-in" + "".join(f"\n  {n:3d}  {who}" for who, n in by_who.most_common()))
