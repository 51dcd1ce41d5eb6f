"""Command line: `python -m servelab setup|lock|plan|keys|notebooks|prose|book|lab|translations|doctor`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import NoReturn

from servelab.machine import profiles


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["doctor"]:  # its own options (servelab.doctor.main)
        from servelab.doctor import main as doctor

        return doctor(argv[1:])
    parser = _Parser(prog="servelab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_setup = sub.add_parser("setup", help="build engine venvs and prepare models for a profile")
    p_setup.add_argument("--profile", default="auto")
    p_setup.add_argument("--env", help="build only this engine env")
    p_setup.add_argument("--model", help="prepare only this local model")
    p_lock = sub.add_parser("lock", help="resolve the pins into servelab/data/locks/NAME.txt (every package, hashed)")
    p_lock.add_argument("names", nargs="*", help="kernel or an engine env (default: all)")
    p_run = sub.add_parser("notebooks", help="execute the notebooks in place (papermill)")
    p_run.add_argument("--profile", default="auto")
    p_run.add_argument("names", nargs="*", help="notebook names (default: all in the table of contents)")
    p_run.add_argument("--keep-going", action="store_true", help="run every chapter even after one fails")
    p_prose = sub.add_parser("prose", help="carry the chapters' edited markdown into their executed notebooks, "
                             "outputs kept (no execution; refused where a code cell changed)")
    p_prose.add_argument("names", nargs="*", help="notebook names (default: all in the table of contents)")
    p_keys = sub.add_parser("keys", help="which committed notebooks are current, which to re-execute, and why")
    p_keys.add_argument("--profile", default="cpu")
    p_keys.add_argument("--all", action="store_true", help="re-execute every chapter")
    p_keys.add_argument("--write", help="write the notebooks to re-execute to this file, one path a line")
    p_plan = sub.add_parser("plan", help="every server the book starts on a profile: commands, downloads, disk, "
                            "starts, time; each launch checked by the engines' own rules (no GPU needed)")
    p_plan.add_argument("--profile", default="auto")
    p_plan.add_argument("--markdown", help="also write the plan as Markdown to this file")
    p_plan.add_argument("--commands", action="store_true", help="print every launch command")
    p_book = sub.add_parser("book", help="build the HTML book into _build/html/<lang>/ (every language)")
    p_book.add_argument("--lang", action="append", help="build only this language (repeatable): en ja ko de es")
    p_lab = sub.add_parser("lab", help="setup + notebooks + book + translated notebooks, all into work/ "
                           "(git-ignored; the committed notebooks and results/ stay as they are)")
    p_lab.add_argument("--profile", default="auto")
    p_lab.add_argument("--lang", action="append", help="build the book only in this language (repeatable)")
    p_lab.add_argument("--in-place", action="store_true", help="regenerate the committed notebooks and results/ "
                       "and build into _build/html/ instead (maintainers)")
    p_ws = sub.add_parser("workshop", help="write book/workshop.md (agendas and instructor notes, from the "
                          "executed chapters and saved results); --check: fail while stale; --plan NAME: print one")
    p_ws.add_argument("--check", action="store_true")
    p_ws.add_argument("--plan")
    sub.add_parser("doctor", help="check this machine before a workshop (--lang, --json, --engines); "
                   "python -m servelab doctor --help")
    p_tr = sub.add_parser("translations", help="catalogs under locales/: update, check, todo, apply, notebooks")
    p_tr.add_argument("action", choices=["update", "check", "todo", "apply", "notebooks"])
    p_tr.add_argument("args", nargs="*",
                      help="update [DOMAIN ...] | todo LANG DOMAIN | apply LANG DOMAIN FILE.po | notebooks [LANG]")
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # one line naming them and what the command accepts, not argparse's usage block
        accepted = [o for a in sub.choices[args.command]._actions for o in a.option_strings
                    if o.startswith("--") and o != "--help"]
        print(f"servelab: error: unknown argument(s) for {args.command}: {' '.join(unknown)}; accepted: "
              f"{', '.join(accepted)}", file=sys.stderr)
        return 2

    try:
        if args.command in ("setup", "notebooks", "lab", "keys", "plan"):
            profiles.load(args.profile)  # fail early, with the list of valid names
        if getattr(args, "lang", None):
            from servelab.book.i18n import check_languages

            check_languages(args.lang)  # before anything runs
        if args.command == "setup":
            return _setup(args)
        if args.command == "keys":
            return _keys(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "prose":
            return _prose(args.names)
        if args.command == "lock":
            return _lock(args.names)
        if args.command == "notebooks":
            from servelab.book.chapters import run_notebooks

            run_notebooks(args.profile, args.names, keep_going=args.keep_going)
        elif args.command == "book":
            from servelab.book.chapters import build_book

            build_book(languages=tuple(args.lang or ()))
        elif args.command == "lab":
            from servelab.book import workspace

            _setup_profile(args.profile)
            workspace.lab(args.profile, tuple(args.lang or ()), in_place=args.in_place)
        elif args.command == "workshop":
            from servelab.book import workshop_page

            return workshop_page.main(["--check"] * args.check + (["--plan", args.plan] if args.plan else []))
        elif args.command == "translations":
            from servelab.book.translations_cli import translations

            return translations(args.action, args.args)
    except (RuntimeError, ValueError, subprocess.CalledProcessError) as err:
        from servelab.machine.provision import SetupProblem

        lines = str(err).strip().splitlines() if isinstance(err, SetupProblem) else [_one_line(err)]
        for line in lines:  # a set-up problem: every one, one line each
            print(f"servelab: error: {line}", file=sys.stderr)
        return 2
    except OSError as err:  # a tool or file missing: say which, not a traceback
        what = f" ({err.filename})" if err.filename else ""
        print(f"servelab: error: {err.strerror or type(err).__name__}{what}", file=sys.stderr)
        return 2
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line (`servelab: error: ...`), like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"servelab: error: {message}\n")


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _keys(args: argparse.Namespace) -> int:
    from servelab.book import chapters, execution_key

    statuses = execution_key.plan(chapters.sources(), profiles.load(args.profile).name, args.all)
    for st in statuses:
        print(f"[chapters] {st.chapter}: " + (f"current (key {st.key})" if st.current else f"re-executed ({st.why})"))
    if args.write:
        stale = [chapters.notebook_path(st.chapter) for st in statuses if not st.current]
        with open(args.write, "w") as f:
            f.write("".join(f"{path}\n" for path in stale))
    return 0


def _prose(names: list[str]) -> int:
    from servelab.book import chapters, prose

    for source in chapters.sources(names or None):
        print(f"[prose] {source.stem}: " + ("updated" if prose.sync(source) else "unchanged"))
    return 0


def _plan(args: argparse.Namespace) -> int:
    import shlex

    from servelab.book import launch_plan

    plan = launch_plan.build(args.profile)
    text = launch_plan.markdown(plan)
    print(text, end="")
    if args.commands:
        for c in plan.chapters:
            for p in c.launches:
                print(f"# {c.chapter}: {p.launch.name}\n{shlex.join(p.argv)}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 1 if plan.problems else 0


def _lock(names: list[str]) -> int:
    from servelab.machine import locks

    for name in names:
        locks.get(name)  # every name checked before anything is resolved
    for name in names or list(locks.specs()):
        path = locks.generate(name)
        print(f"[lock] {name}: {len(locks.pins(path))} packages -> {path}", flush=True)
    return 0


def _setup(args: argparse.Namespace) -> int:
    from servelab.machine import engine_envs, models

    if args.model:
        models.check_local_name(args.model)  # before anything is built
    if args.env:
        engine_envs.get(args.env)
        engine_envs.build(args.env)
    if args.model:
        models.prepare_local(args.model, engine_envs.build(profiles.load(args.profile).vllm_env).python)
    if not (args.env or args.model):
        _setup_profile(args.profile)
    return 0


def _setup_profile(name: str) -> None:
    """Setup of a whole profile, as `setup` and `lab` run it: on a GPU profile with every hub model any chapter
    starts (the plan's declarations), so that setup downloads them all before an engine starts."""
    from servelab.machine.provision import setup

    profile = profiles.load(name)
    hub_models: list[str] = []
    if not profile.is_cpu:
        from servelab.book import launch_plan

        hub_models = launch_plan.build(profile.name, check=False).models
    setup(profile.name, hub_models=hub_models)


if __name__ == "__main__":
    sys.exit(main())
