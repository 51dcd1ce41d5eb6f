"""Check vLLM launch commands with vLLM's own argument parser, without starting anything.

Runs inside the vLLM venv and imports nothing from servelab. Each command goes through vLLM's real
entry point: `vllm serve` through `vllm.entrypoints.cli.main.main()` (FlexibleArgumentParser,
the serve subcommand's `make_arg_parser`, then `validate_parsed_serve_args` and the serve
command's own checks), `python -m vllm.entrypoints.openai.api_server` through that module's
`__main__` block (which calls `vllm.entrypoints.launchers.api_server.entry.main`). What would
start a server is replaced by a recorder: `run_server`, the multi-server/headless/DP launchers and
`uvloop.run`. The recorded arguments then go through `AsyncEngineArgs.from_cli_args`, as
`run_server` would do first. No model config is built (that would need the model hub).

stdin: {"commands": [{"form": "serve" | "module", "module": NAME, "args": [...]}, ...]}
stdout: one JSON document {"engine": "vllm", "version": ..., "results": [{"ok", "error", "warnings",
"stage", "args"}, ...]}. Everything the engine prints goes to stderr.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import logging
import os
import runpy
import sys
import traceback
import warnings

LOGGER_PREFIX = "vllm"


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


class Engine:
    """vLLM's entry points with the parts that would start a server replaced by recorders."""

    def __init__(self) -> None:
        import uvloop
        import vllm.entrypoints.cli.main as cli_main
        import vllm.entrypoints.cli.serve as serve
        import vllm.entrypoints.launchers.api_server.entry as entry
        import vllm.entrypoints.launchers.cli_args as cli_args

        self.cli_main = cli_main
        self.recorded: list = []
        self.stage = "parse"
        record = self.recorded.append
        real_validate = cli_args.validate_parsed_serve_args

        def validate(args):
            self.stage = "validate"  # parsing succeeded; vLLM's post-parse checks run next
            real_validate(args)

        cli_args.validate_parsed_serve_args = validate  # entry.main imports it at call time
        serve.validate_parsed_serve_args = validate  # ServeSubcommand.validate's module global

        def recorder(args, *_, **__):
            record(args)

        def never_run(coro, *_, **__):
            if hasattr(coro, "close"):
                coro.close()

        uvloop.run = never_run  # the safety net: nothing async is ever run here
        entry.run_server = recorder
        for name in ("run_server", "run_headless", "run_multi_api_server", "run_dp_supervisor"):
            setattr(serve, name, lambda *a, **k: None)
        real_cmd = serve.ServeSubcommand.cmd

        def cmd(args):
            record(args)
            real_cmd(args)

        serve.ServeSubcommand.cmd = staticmethod(cmd)

    def run(self, command: dict) -> dict:
        import vllm.logger

        for fn in (vllm.logger._print_warning_once, vllm.logger._print_info_once, vllm.logger._print_debug_once):
            fn.cache_clear()
        args = list(command["args"])
        self.recorded.clear()
        self.stage = "parse"
        env = dict(os.environ)
        try:
            with Capture() as cap:
                try:
                    if command["form"] == "serve":
                        sys.argv = ["vllm", "serve", *args]
                        self.cli_main.main()
                    else:
                        sys.argv = [command["module"], *args]
                        runpy.run_module(command["module"], run_name="__main__", alter_sys=True)
                    if not self.recorded:
                        raise RuntimeError("vLLM's entry point returned without reaching its launcher")
                    self.stage = "engine_args"
                    error = check_engine_args(self.recorded[-1])
                    if error:
                        self.stage = "speculative_config"
                        raise ValueError(error)
                except BaseException as err:  # noqa: BLE001 - the engine's own error is the result
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    failure = err
                else:
                    failure = None
        finally:
            os.environ.clear()
            os.environ.update(env)
        if failure is None:
            return {"ok": True, "error": "", "warnings": cap.warnings(), "stage": "", "args": args}
        return {"ok": False, "error": describe(failure, cap.stderr.getvalue()), "warnings": cap.warnings(),
                "stage": self.stage, "args": args}


def check_engine_args(args) -> str:
    """AsyncEngineArgs.from_cli_args (what run_server does first) and the speculative JSON's keys."""
    import dataclasses

    from vllm.config import SpeculativeConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    engine_args = AsyncEngineArgs.from_cli_args(args)
    spec = engine_args.speculative_config
    if isinstance(spec, dict):
        known = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        unknown = sorted(k for k in spec if k.replace("-", "_") not in known)
        if unknown:
            return (f"--speculative-config has keys SpeculativeConfig does not define: {unknown} "
                    "(vLLM forbids extra fields when it builds the config)")
    return ""


def main() -> None:
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)  # the engine's own prints and logs go to stderr; stdout carries only the JSON
        request = json.load(sys.stdin)
        import vllm

        engine = Engine()
        results = [engine.run(c) for c in request["commands"]]
        out.write(json.dumps({"engine": "vllm", "version": vllm.__version__, "results": results}))


if __name__ == "__main__":
    main()
