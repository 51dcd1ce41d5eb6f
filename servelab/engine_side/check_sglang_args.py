"""Check SGLang launch commands with SGLang's own argument parser and resolution, starting nothing.

Runs inside the SGLang venv and imports nothing from servelab. Each command goes through SGLang's
real entry point: `sglang serve` through `sglang.cli.main.main()` (which calls
`prepare_server_args(argv)`), `python -m sglang.launch_server` through that module's own
`__main__` block. Where those would call `run_server`, this runs only its first step,
`server_args.resolve_once()`: SGLang's resolution pipeline, which validates the arguments against
each other and against the model's config.json. `SGLANG_USE_CPU_ENGINE` is never set here.

Without `--device`, SGLang detects the accelerator; on a machine without one that raises
"No accelerator ...", a fact about this machine, not about the command. Then `--device cuda` is
added and the result says so in its warnings.

stdin: {"commands": [{"form": "serve" | "launch_server", "args": [...]}, ...]}
stdout: one JSON document {"engine": "sglang", "version": ..., "results": [{"ok", "error",
"warnings", "stage", "args"}, ...]}. Everything the engine prints goes to stderr.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import logging
import os
import sys
import traceback
import warnings

LOGGER_PREFIX = "sglang"

os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # before sglang is imported: is_cpu() reads it


def _one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("( ", "(").replace(" )", ")").replace("[ ", "[").replace(" ]", "]")


def _where(err: BaseException) -> tuple[str, int, str]:
    """File (relative to site-packages), line and whole source statement where `err` was raised."""
    frame = traceback.extract_tb(err.__traceback__)[-1]
    source = "".join(linecache.getlines(frame.filename))
    statement = frame.line or ""
    with contextlib.suppress(SyntaxError, ValueError):
        best = None
        for node in ast.walk(ast.parse(source)):
            inside = isinstance(node, ast.stmt) and node.lineno <= frame.lineno <= (node.end_lineno or node.lineno)
            if inside and (best is None or node.lineno >= best.lineno):
                best = node
        if best is not None:
            statement = ast.get_source_segment(source, best) or statement
            return frame.filename.split("site-packages/")[-1], best.lineno, _one_line(statement)
    return frame.filename.split("site-packages/")[-1], frame.lineno or 0, _one_line(statement)


def _importing() -> bool:
    """Whether the caller runs inside an import statement (a module body being executed)."""
    return any(frame.filename.startswith("<frozen importlib") for frame in traceback.extract_stack())


def describe(err: BaseException, stderr: str) -> str:
    """The engine's own error, as one line."""
    if isinstance(err, SystemExit):
        lines = stderr.splitlines()
        start = next((i for i, line in enumerate(lines) if ": error: " in line), None)
        if start is not None:
            return _one_line(" ".join(lines[start:]))
        return f"exited with status {err.code} while parsing: {_one_line(stderr)[-300:]}"
    if isinstance(err, AssertionError):
        where, line, statement = _where(err)
        return f"AssertionError at {where}:{line}: {statement}" + (f" -> {_one_line(err)}" if str(err) else "")
    return f"{type(err).__name__}: {_one_line(err)}"


class Capture:
    """Warnings the engine emits while one command is checked: its loggers' and Python's.

    Messages emitted while a module is being imported are left out: they are import noise
    (platform support notices, deprecated APIs of dependencies), not about the command.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.stderr = io.StringIO()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Capture:
        original = logging.Logger.handle
        messages = self.messages

        def handle(logger: logging.Logger, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING and record.name.split(".")[0] == LOGGER_PREFIX and not _importing():
                messages.append(_one_line(record.getMessage()))
            original(logger, record)

        def showwarning(message, category, *_, **__) -> None:
            if not _importing():
                messages.append(f"{category.__name__}: {_one_line(message)}")

        logging.Logger.handle = handle  # type: ignore[method-assign]
        self._stack.callback(setattr, logging.Logger, "handle", original)
        self._stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("always")
        warnings.showwarning = showwarning
        self._stack.enter_context(contextlib.redirect_stderr(self.stderr))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def warnings(self) -> list[str]:
        return list(dict.fromkeys(self.messages))


def _main_block(module) -> object:
    """The code of `module`'s `if __name__ == "__main__":` block, compiled against its own file."""
    tree = ast.parse("".join(linecache.getlines(module.__file__)))
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return compile(ast.Module(body=node.body, type_ignores=[]), module.__file__, "exec")
    raise RuntimeError(f"{module.__name__} has no __main__ block")


class Engine:
    """SGLang's entry points, with run_server cut down to its resolution step."""

    def __init__(self) -> None:
        import sglang.cli.main as cli_main
        import sglang.cli.serve as serve
        import sglang.launch_server as launch_server

        self.cli_main = cli_main
        self.launch_server = launch_server
        self.stage = "parse"
        self.resolved: list = []

        def run_server(server_args) -> None:
            self.stage = "resolve"  # parsed: prepare_server_args returned a ServerArgs record
            self.resolved.append(server_args)
            server_args.resolve_once()

        def no_kill(*_, **__) -> None:
            return None

        self.run_server = run_server
        self.no_kill = no_kill
        launch_server.run_server = run_server  # sglang.cli.serve imports it from here at call time
        serve.kill_process_tree = no_kill  # serve() kills this process's children on the way out

    def device_missing(self) -> str:
        """SGLang's own message when it cannot detect an accelerator here, else ""."""
        from sglang.srt.utils.common import get_device

        try:
            get_device()
        except RuntimeError as err:
            return _one_line(err)
        return ""

    def run(self, command: dict) -> dict:
        args = list(command["args"])
        notes: list[str] = []
        has_device = any(a == "--device" or a.startswith("--device=") for a in args)
        if not has_device and not any(a in ("-h", "--help") for a in args) and (why := self.device_missing()):
            args += ["--device", "cuda"]
            notes.append(f"checked with --device cuda added: no GPU here (SGLang's device detection: {why})")
        self.stage = "parse"
        self.resolved.clear()
        env = dict(os.environ)
        failure: BaseException | None = None
        try:
            with Capture() as cap:
                try:
                    if command["form"] == "serve":
                        sys.argv = ["sglang", "serve", *args]
                        self.cli_main.main()
                    else:
                        sys.argv = [self.launch_server.__file__, *args]
                        namespace = {**vars(self.launch_server), "__name__": "__main__",
                                     "run_server": self.run_server, "kill_process_tree": self.no_kill}
                        exec(_main_block(self.launch_server), namespace)
                    if not self.resolved:
                        raise RuntimeError("SGLang's entry point returned without reaching run_server")
                except BaseException as err:  # noqa: BLE001 - the engine's own error is the result
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    failure = err
        finally:
            os.environ.clear()
            os.environ.update(env)
        found = notes + cap.warnings()
        if failure is None:
            return {"ok": True, "error": "", "warnings": found, "stage": "", "args": args}
        return {"ok": False, "error": describe(failure, cap.stderr.getvalue()), "warnings": found,
                "stage": self.stage, "args": args}


def main() -> None:
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)  # the engine's own prints and logs go to stderr; stdout carries only the JSON
        request = json.load(sys.stdin)
        import sglang

        engine = Engine()
        results = [engine.run(c) for c in request["commands"]]
        out.write(json.dumps({"engine": "sglang", "version": sglang.__version__, "results": results}))


if __name__ == "__main__":
    main()
