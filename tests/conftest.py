"""Shared fixtures. Engine tests need the cpu profile's engine venvs and model (./test.sh sets them up)."""

from __future__ import annotations

import pytest

from servelab.machine import engine_envs, models, profiles


@pytest.fixture(scope="session")
def cpu() -> profiles.Profile:
    return profiles.load("cpu")


def require_engine(engine: str) -> None:
    """Engine tests fail (not skip) when set-up is missing: CI must never pass by testing nothing."""
    prof = profiles.load("cpu")
    engine_envs.get(prof.engine_env(engine)).require()
    models.resolve(prof.model)
