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

import runpy
import sys

from engine_report import answer_checks, run_check  # noqa: E402 (beside this script)

LOGGER_PREFIX = "vllm"




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

        def invoke() -> None:
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

        return run_check(LOGGER_PREFIX, invoke, lambda: self.stage, args)


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


if __name__ == "__main__":
    answer_checks("vllm", Engine)
