"""Run scripts in this venv without paying its engine's import each time (servelab.machine.warm_scripts).

Started with the environment and working directory its scripts will have, it imports the engine once, says
`{"ready": [...]}` on stdout and then reads one JSON request per stdin line: a script, its arguments, its
environment (the server's, give or take a variable that changes no import) and the files that stand for its
stdin, stdout and stderr. For each it forks; the child runs the script as `python script args...` would
(argv, sys.path[0], `__main__`, exit code), and the server answers `{"pid": N}` at once and `{"rc": N}` when
the child has ended. It exits when its stdin closes. It imports nothing from servelab.
"""

import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import runpy
import sys
import traceback

# What each engine's scripts import first; the first module found here is imported before any request.
PRELOADS = {"vllm": ["vllm.engine.arg_utils"], "sglang": ["sglang.srt.server_args"], "torch": ["torch"]}


def preload() -> list[str]:
    for package, modules in PRELOADS.items():
        if importlib.util.find_spec(package) is not None:
            for module in modules:
                importlib.import_module(module)
            return modules
    return []


def _redirect(path: str, fd: int, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def child(request: dict) -> None:
    """In the forked child: become `python script args...` and never return."""
    code = 1
    try:
        _redirect(request["stdin"], 0, os.O_RDONLY)
        _redirect(request["stdout"], 1, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        _redirect(request["stderr"], 2, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - they live as long as the child
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        script = request["script"]
        sys.argv = [script, *request["argv"]]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - the script's own failure, reported as python would
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def main() -> None:
    protocol_in, protocol_out = sys.stdin, sys.stdout
    try:
        ready = preload()
    except BaseException as err:  # noqa: BLE001 - told to the client, which then runs scripts the cold way
        protocol_out.write(json.dumps({"error": f"{type(err).__name__}: {err}"}) + "\n")
        protocol_out.flush()
        return
    protocol_out.write(json.dumps({"ready": ready}) + "\n")
    protocol_out.flush()
    for line in protocol_in:
        request = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(request)
        protocol_out.write(json.dumps({"pid": pid}) + "\n")
        protocol_out.flush()
        _, status = os.waitpid(pid, 0)
        protocol_out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        protocol_out.flush()


if __name__ == "__main__":
    main()
