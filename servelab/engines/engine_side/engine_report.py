"""What the engine-side checkers report: an engine's error as one line, and the warnings it emits.

Standard library only: the checker scripts beside this file import it by name (a script's own
folder is first on its import path), inside whichever engine venv runs them.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import linecache
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any


def one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("( ", "(").replace(" )", ")").replace("[ ", "[").replace(" ]", "]")


def where(err: BaseException) -> tuple[str, int, str]:
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
            return frame.filename.split("site-packages/")[-1], best.lineno, one_line(statement)
    return frame.filename.split("site-packages/")[-1], frame.lineno or 0, one_line(statement)


def _importing() -> bool:
    """Whether the caller runs inside an import statement (a module body being executed)."""
    return any(frame.filename.startswith("<frozen importlib") for frame in traceback.extract_stack())


def describe(err: BaseException, stderr: str) -> str:
    """The engine's own error, as one line."""
    if isinstance(err, SystemExit):
        lines = stderr.splitlines()
        start = next((i for i, line in enumerate(lines) if ": error: " in line), None)
        if start is not None:
            return one_line(" ".join(lines[start:]))
        return f"exited with status {err.code} while parsing: {one_line(stderr)[-300:]}"
    if isinstance(err, AssertionError):
        file, line, statement = where(err)
        return f"AssertionError at {file}:{line}: {statement}" + (f" -> {one_line(err)}" if str(err) else "")
    return f"{type(err).__name__}: {one_line(err)}"


class Capture:
    """Warnings an engine emits while one command is checked: its loggers' (`logger_prefix`) and Python's.

    Messages emitted while a module is being imported are left out: they are import noise
    (platform support notices, deprecated APIs of dependencies), not about the command.
    """

    def __init__(self, logger_prefix: str) -> None:
        self.logger_prefix = logger_prefix
        self.messages: list[str] = []
        self.stderr = io.StringIO()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Capture:
        original = logging.Logger.handle
        messages, prefix = self.messages, self.logger_prefix

        def handle(logger: logging.Logger, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING and record.name.split(".")[0] == prefix and not _importing():
                messages.append(one_line(record.getMessage()))
            original(logger, record)

        def showwarning(message, category, *_, **__) -> None:
            if not _importing():
                messages.append(f"{category.__name__}: {one_line(message)}")

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


def run_check(logger_prefix: str, invoke: Callable[[], None], stage: Callable[[], str], args: list[str],
              notes: list[str] | None = None) -> dict:
    """Run one command through an engine's entry point (`invoke`) and report it as a result record.

    The engine may change os.environ while it parses; it is restored afterwards. `stage` says where the
    command failed, read after the failure; `notes` go before the engine's own warnings.
    """
    env = dict(os.environ)
    failure: BaseException | None = None
    try:
        with Capture(logger_prefix) as cap:
            try:
                invoke()
            except BaseException as err:  # noqa: BLE001 - the engine's own error is the result
                if isinstance(err, KeyboardInterrupt):
                    raise
                failure = err
    finally:
        os.environ.clear()
        os.environ.update(env)
    found = (notes or []) + cap.warnings()
    if failure is None:
        return {"ok": True, "error": "", "warnings": found, "stage": "", "args": args}
    return {"ok": False, "error": describe(failure, cap.stderr.getvalue()), "warnings": found, "stage": stage(),
            "args": args}


def answer_checks(engine_name: str, make_checker: Callable[[], Any]) -> None:
    """Check every command of the JSON request on stdin; write one JSON answer to stdout.

    The engine's own prints and logs go to stderr, so stdout carries only the answer.
    """
    with os.fdopen(os.dup(1), "w") as out:
        os.dup2(2, 1)
        request = json.load(sys.stdin)
        version = importlib.import_module(engine_name).__version__
        checker = make_checker()
        results = [checker.run(command) for command in request["commands"]]
        out.write(json.dumps({"engine": engine_name, "version": version, "results": results}))
