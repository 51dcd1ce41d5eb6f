"""`python -m servelab doctor`: a pre-flight of one machine for a workshop, in under a minute.

One line per check, ok or the problem and what to do, in the participant's language (`--lang`, else
SERVELAB_LANG); the exit status is 1 when any check found a problem; `--json` prints the same as data,
for an instructor collecting the results of a room. Nothing is installed and no engine starts, unless
`--engines` asks: then each engine of the profile starts once and stops.

The checks decide as setup and the GPU plan do: the Python range and the driver rule of
`servelab.machine.gpu_checks`, the engine venvs and their locks (`EngineEnv.is_ready`), the converted
model's checksums (`models.is_prepared(deep=True)`), the venvs' sizes of data/engine_envs.toml, the hub's
gated models (`hub.needs_token`); this module only words the answers in the participant's language.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from servelab.book.i18n import check_languages, t
from servelab.book.plots import CJK_FONTS
from servelab.machine import engine_envs, gpu_checks, hardware, hub, locks, models, paths, profiles
from servelab.machine.profiles import Profile

MIN_CORES = 2  # the book's run times and budgets are measured on two cores
# On the cpu profile the chapters keep servers side by side. Measured here (PSS of every process of an idle server,
# 23,296 KV tokens): vLLM 3.3 GiB (1 GiB of it KV), SGLang 4.2 GiB. Chapter 05 holds three SGLang servers at once
# (12.7 GiB); chapter 06 four vLLM servers with 0.53 GiB of KV and two with 0.26 GiB (about 16 GiB, from the same
# measurement less the KV they do not hold); the kernel and the load client come on top.
MIN_MEMORY_GIB = 18.0
LOCAL_MODEL_GIB = 1.0  # the cpu model: its GGUF file and the converted float32 folder, 0.7 GiB measured


@dataclass(frozen=True)
class Result:
    check: str
    ok: bool
    message: str  # what was found and, for a problem, what to do; in the participant's language


def python_version(version: tuple[int, int] | None = None) -> Result:
    version = version or sys.version_info[:2]
    (low, high), found = gpu_checks.PYTHONS, ".".join(map(str, version))
    wanted = f"{low[0]}.{low[1]}-{high[0]}.{high[1]}"
    if gpu_checks.python_problem(version) is None:
        return Result("python", True, t("Python {found}, within {wanted}").format(found=found, wanted=wanted))
    return Result("python", False, t("Python {found} cannot run both engines: install Python {wanted} and run "
                                     "./lab.sh again").format(found=found, wanted=wanted))


def cores(count: int | None = None) -> Result:
    found = count if count is not None else os.cpu_count() or 1
    if found >= MIN_CORES:
        return Result("cores", True, t("{found} CPU cores").format(found=found))
    return Result("cores", False, t("{found} CPU core(s), fewer than {least}: the engines and the notebook would "
                                    "share one core; use a machine with at least {least}").format(
                                        found=found, least=MIN_CORES))


def memory(gib: float | None = None) -> Result:
    found = hardware.memory_gib() if gib is None else gib
    if found >= MIN_MEMORY_GIB:
        return Result("memory", True, t("{found:.1f} GiB of memory").format(found=found))
    return Result("memory", False, t("{found:.1f} GiB of memory, less than the {least:.0f} GiB that chapters 05 "
                                     "and 06 need for the engine servers they keep side by side: use a larger "
                                     "machine").format(found=found, least=MIN_MEMORY_GIB))


def _setup_needs_gib(profile: Profile) -> float:
    envs = {profile.vllm_env, profile.sglang_env}
    venvs = sum(gpu_checks.env_bytes(e) for e in envs if not engine_envs.get(e).is_ready()) / gpu_checks.GIB
    local = profile.model.removeprefix("local:")
    return venvs + (LOCAL_MODEL_GIB if profile.is_cpu and not models.is_prepared(local) else 0.0)


def disk(profile: Profile, free_gib: float | None = None) -> Result:
    home = paths.cache_home()
    where = next(p for p in (home, *home.parents) if p.exists())
    found = shutil.disk_usage(where).free / 2**30 if free_gib is None else free_gib
    need = _setup_needs_gib(profile)
    if found >= need:
        return Result("disk", True, t("{found:.0f} GiB free at {where}; setup still needs {need:.1f} GiB").format(
            found=found, where=home, need=need))
    return Result("disk", False, t("{found:.1f} GiB free at {where}, but setup needs {need:.1f} GiB: free some "
                                   "space or set SERVELAB_HOME to a larger disk").format(found=found, where=home,
                                                                                        need=need))


def engine_venvs(profile: Profile) -> list[Result]:
    out = []
    for name in (profile.vllm_env, profile.sglang_env):
        env = engine_envs.get(name)
        if env.is_ready():
            out.append(Result(f"venv {name}", True, t("engine venv {name}: built from its lock").format(name=name)))
        elif problems := locks.problems(env.lock):
            out.append(Result(f"venv {name}", False, t("engine venv {name}: its lock and pins disagree ({why}): run "
                                                       "python -m servelab lock").format(name=name, why=problems[0])))
        else:
            out.append(Result(f"venv {name}", False, t("engine venv {name}: missing or built from another lock: run "
                                                       "./lab.sh or python -m servelab setup").format(name=name)))
    return out


def model(profile: Profile) -> Result:
    if not profile.is_cpu:
        return Result("model", True, t("model {model}: downloaded from the hub by setup").format(model=profile.model))
    name = profile.model.removeprefix("local:")
    if models.is_prepared(name, deep=True):
        return Result("model", True, t("model {model}: converted, checksums match").format(model=name))
    return Result("model", False, t("model {model}: missing or its checksums do not match: run python -m servelab "
                                    "setup").format(model=name))


def font(lang: str, installed: set[str] | None = None) -> Result:
    if lang not in ("ja", "ko"):
        return Result("font", True, t("no CJK font needed for {lang}").format(lang=lang))
    if installed is None:
        from matplotlib import font_manager

        installed = {f.name for f in font_manager.fontManager.ttflist}
    if found := [f for f in CJK_FONTS if f in installed]:
        return Result("font", True, t("CJK font {font}").format(font=found[0]))
    return Result("font", False, t("no CJK font ({fonts}): plot labels would show empty boxes; install one "
                                   "(Debian/Ubuntu: sudo apt-get install fonts-noto-cjk)").format(
                                       fonts=", ".join(CJK_FONTS)))


def loopback(bind: Callable[[], int] | None = None) -> Result:
    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    try:
        port = (bind or free_port)()
    except OSError as err:
        return Result("ports", False, t("cannot open a port on 127.0.0.1 ({error}): the engines serve there; "
                                        "check the firewall or the sandbox").format(error=err))
    return Result("ports", True, t("a free port on 127.0.0.1 ({port})").format(port=port))


def gpu(profile: Profile, driver: str | None = None) -> Result:
    if profile.is_cpu:
        return Result("gpu", True, t("profile {name}: no GPU needed").format(name=profile.name))
    driver = driver or gpu_checks.driver_version()
    majors = [m for e in ("vllm", "sglang") if (m := gpu_checks.cuda_major(profile.engine_env(e)))]
    cuda = max(majors, default=0)
    wanted = gpu_checks.MIN_DRIVER.get(cuda, "")
    if gpu_checks.driver_problem(profile, driver) is None:
        return Result("gpu", True, t("NVIDIA driver {driver}, enough for CUDA {cuda}").format(driver=driver, cuda=cuda))
    if driver is None:
        return Result("gpu", False, t("profile {name} needs an NVIDIA GPU and its driver (nvidia-smi finds none): "
                                      "install driver {wanted} or newer, or choose the cpu profile").format(
                                          name=profile.name, wanted=wanted))
    return Result("gpu", False, t("NVIDIA driver {driver} is too old for CUDA {cuda}, which the engines use: update "
                                  "it to {wanted} or newer").format(driver=driver, cuda=cuda, wanted=wanted))


def hub_access(profile: Profile) -> Result:
    gated = hub.needs_token([m for m in (profile.model, profile.draft_model) if m and not m.startswith("local:")])
    if not gated:
        return Result("hub", True, t("no gated model on profile {name}").format(name=profile.name))
    if hub.token():
        return Result("hub", True, t("a hub token for the gated models ({models})").format(models=", ".join(gated)))
    return Result("hub", False, t("{models} gated on the Hugging Face hub and no token: accept the licence on each "
                                  "model page and set HF_TOKEN").format(models=", ".join(gated)))


def engine_starts(profile: Profile) -> list[Result]:
    from servelab.engines.server import Server

    out = []
    for engine in ("vllm", "sglang"):
        server = Server(engine, profile)
        try:
            server.start()
            out.append(Result(f"start {engine}", True, t("{engine} started and answered").format(engine=engine)))
        except Exception as err:  # noqa: BLE001 - any failure to start is the finding
            out.append(Result(f"start {engine}", False, t("{engine} did not start ({error}): see its log").format(
                engine=engine, error=str(err).splitlines()[0][:200])))
        finally:
            server.stop()
    return out


def run(profile: Profile, lang: str, *, engines: bool = False) -> list[Result]:
    results = [python_version(), cores(), memory(), disk(profile), *engine_venvs(profile), model(profile),
               font(lang), loopback(), gpu(profile), hub_access(profile)]
    return results + (engine_starts(profile) if engines else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servelab doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--lang", help="en ja ko de es (default: SERVELAB_LANG, else en)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--engines", action="store_true", help="also start each engine once")
    args = parser.parse_args(argv)
    try:
        profile = profiles.load(args.profile)
        if args.lang:
            os.environ["SERVELAB_LANG"] = check_languages([args.lang])[0]
        lang = os.environ.get("SERVELAB_LANG") or "en"
        check_languages([lang])
    except ValueError as err:
        print(f"servelab doctor: {err}", file=sys.stderr)
        return 2
    results = run(profile, lang, engines=args.engines)
    if args.json:
        print(json.dumps({"profile": profile.name, "lang": lang, "host": os.uname().nodename,
                          "results": [asdict(r) for r in results]}, ensure_ascii=False, indent=1))
    else:
        for r in results:
            print(f"{t('ok') if r.ok else t('PROBLEM')}: {r.message}")
    return 0 if all(r.ok for r in results) else 1
