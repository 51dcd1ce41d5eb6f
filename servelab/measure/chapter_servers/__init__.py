"""The servers each chapter starts, as data: engine, model, options, how often, on any profile.

A chapter's notebook takes its servers from its module here (`c03.servers(profile, **parameters)`), and
`python -m servelab plan` reads the same declarations for a GPU profile to list, check and cost every
launch before anything is rented (servelab.book.launch_plan). What each chapter really started is
recorded when it runs (`starts` in the executed notebook's metadata); a test holds the cpu profile's
declarations to those records, so a server a chapter starts but does not declare fails CI.

One module per chapter, so a chapter depends only on its own declarations (its execution key).
Sizes a chapter reads from the running engine (vLLM's block size) are declared as the engine's
default for the profile's device, which the records check on cpu.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from servelab.engines.server import Server
from servelab.machine.profiles import Profile

CHAPTERS = ("00", "01", "02", "03", "04", "05", "06", "07")
# vLLM's block size when none is given: CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py) on CUDA; the CPU
# platform raises it (CpuPlatform.check_and_update_config in vllm/platforms/cpu.py).
VLLM_BLOCK_SIZE = {"cpu": 128, "cuda": 16}


@dataclass(frozen=True)
class Launch:
    """One server a chapter starts: `options` are `Server(engine, profile, **options)`'s."""

    name: str
    engine: str
    options: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # None: the profile's model
    starts: int = 1  # how often the chapter starts it
    refused: bool = False  # started to show that the engine refuses it
    needs: str = ""  # why it is only on some profiles ("" on all)

    def server(self, profile: Profile, **extra: Any) -> Server:
        """This launch as a Server (not started)."""
        return Server(self.engine, profile, model=self.model, **self.options, **extra)

    def kwargs(self) -> dict[str, Any]:
        """`running(**launch.kwargs(), profile=...)`'s arguments besides the profile."""
        return {"engine": self.engine, "model": self.model, **self.options}


def by_name(*launches: Launch) -> dict[str, Launch]:
    return {launch.name: launch for launch in launches}


def two_sequences(profile: Profile) -> int:
    """A KV budget of two full-length sequences of the profile."""
    return 2 * profile.max_model_len


def of(chapter: str, profile: Profile, **parameters: Any) -> dict[str, Launch]:
    """The servers chapter `chapter` ("03") starts on `profile` with these parameters, by name."""
    if chapter not in CHAPTERS:
        raise ValueError(f"unknown chapter {chapter!r}; accepted: {', '.join(CHAPTERS)}")
    return importlib.import_module(f"{__name__}.c{chapter}").servers(profile, **parameters)
