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
import linecache
import os
import sys

from engine_report import answer_checks, one_line, run_check  # noqa: E402 (beside this script)

LOGGER_PREFIX = "sglang"

os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # before sglang is imported: is_cpu() reads it




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
            return one_line(err)
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

        def invoke() -> None:
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

        return run_check(LOGGER_PREFIX, invoke, lambda: self.stage, args, notes)


if __name__ == "__main__":
    answer_checks("sglang", Engine)
