"""Chapter 06's deployment recipes (servelab/data/recipes.toml), judged by the engines' own parsers.

A recipe is a launch command for one setting (one GPU, four GPUs with tensor parallelism, two nodes);
the articles' commands and their corrected forms come from article_commands.toml. `table` checks every
command with `servelab.engines.flags` (the engine's real entry point and argument classes, at the
version installed in its venv) and returns one row per command with the parser's verdict.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from servelab.engines import flags
from servelab.engines.engine_side import script
from servelab.machine import datafiles, engine_envs
from servelab.machine.profiles import Profile

DATA_FILE = "recipes.toml"
ENGINES = ("vllm", "sglang")
_KEYS = {"id", "engine", "setting", "command", "source", "note", "before"}


class BadRecipe(ValueError):
    pass


@dataclass(frozen=True)
class Recipe:
    id: str
    engine: str
    setting: str
    command: tuple[str, ...]
    source: str
    note: str
    before: tuple[str, ...] = ()


@dataclass(frozen=True)
class Book:
    settings: tuple[str, ...]
    recipes: tuple[Recipe, ...]
    explained: dict[str, dict[str, str]]  # engine -> flag -> what it does


def parse(data: dict) -> Book:
    """The recipes in a loaded table, validated (BadRecipe names the recipe, key and value)."""
    settings = tuple(data.get("settings") or ())
    if not settings:
        raise BadRecipe(f"{DATA_FILE}: 'settings' is {data.get('settings')!r}; accepted: a non-empty list of names")
    recipes, seen = [], set()
    for i, raw in enumerate(data.get("recipe") or [], 1):
        where = f"{DATA_FILE}: recipe #{i} ({raw.get('id', '?')})"
        for key in sorted(set(raw) - _KEYS):
            raise BadRecipe(f"{where}: unknown key {key!r}; accepted: {', '.join(sorted(_KEYS))}")
        if raw.get("engine") not in ENGINES:
            raise BadRecipe(f"{where}: engine is {raw.get('engine')!r}; accepted: {', '.join(ENGINES)}")
        if raw.get("setting") not in settings:
            raise BadRecipe(f"{where}: setting is {raw.get('setting')!r}; accepted: {', '.join(settings)}")
        command = raw.get("command")
        if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
            raise BadRecipe(f"{where}: command is {command!r}; accepted: a non-empty list of strings (argv)")
        if raw["id"] in seen:
            raise BadRecipe(f"{where}: id {raw['id']!r} is used twice; accepted: a unique id")
        seen.add(raw["id"])
        recipes.append(Recipe(raw["id"], raw["engine"], raw["setting"], tuple(command), raw.get("source", ""),
                              raw.get("note", ""), tuple(raw.get("before", ()))))
    if not recipes:
        raise BadRecipe(f"{DATA_FILE}: no [[recipe]]; accepted: at least one")
    explained = {e: dict((data.get("flags") or {}).get(e) or {}) for e in ENGINES}
    return Book(settings, tuple(recipes), explained)


def load(folder: Path | None = None) -> Book:
    return parse(datafiles.load(DATA_FILE, folder))


def flags_of(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The long flags of a command, in order, once each (`--x=v` counts as `--x`)."""
    return list(dict.fromkeys(a.split("=", 1)[0] for a in argv if a.startswith("--")))


def commands(book: Book) -> list[dict]:
    """Every command the chapter shows: the articles' (as written and corrected), then the recipes."""
    out = []
    for entry in flags.article_commands():
        out.append({"id": entry["id"], "engine": entry["engine"], "setting": "the articles",
                    "form": entry.get("source", "as the articles show it"), "command": list(entry["command"])})
        out.append({"id": entry["id"], "engine": entry["engine"], "setting": "the articles",
                    "form": "corrected", "command": list(entry["corrected"])})
    out += [{"id": r.id, "engine": r.engine, "setting": r.setting, "form": "recipe", "command": list(r.command)}
            for r in book.recipes]
    return out


def unexplained(book: Book) -> list[str]:
    """'engine: flag (command id)' for each flag a shown command uses that [flags] does not explain."""
    return [f"{c['engine']}: {flag} ({c['id']})" for c in commands(book) for flag in flags_of(c["command"])
            if flag not in book.explained[c["engine"]]]


def table(book: Book) -> pd.DataFrame:
    """One row per command with its engine's own verdict (one checker process per engine)."""
    shown = commands(book)
    verdicts = flags.check_commands([(c["engine"], c["command"]) for c in shown])
    rows = []
    for c, v in zip(shown, verdicts, strict=True):
        rows.append({"engine": c["engine"], "setting": c["setting"], "id": c["id"], "form": c["form"],
                     "command": shlex.join(c["command"]), "accepted": v.ok, "engine's error": v.error,
                     "warnings": len(v.warnings), "checked with": v.checked_with})
    return pd.DataFrame(rows)


def explanations(book: Book) -> pd.DataFrame:
    """The flags the recipes use, with what each sets and trades; one row per (engine, flag)."""
    used = {(c["engine"], f) for c in commands(book) if c["form"] == "recipe" for f in flags_of(c["command"])}
    rows = [{"engine": e, "flag": f, "what it does": text} for e in ENGINES
            for f, text in book.explained[e].items() if (e, f) in used]
    return pd.DataFrame(rows)


def memory_defaults(profile: Profile, timeout: float = 300) -> dict[str, dict]:
    """What the memory and capacity flags default to and reserve, read inside each engine's venv from its
    own config classes (engine_side/{vllm,sglang}_memory_defaults.py); keyed by engine."""
    pythons = {e: engine_envs.get(profile.engine_env(e)).require().python for e in ENGINES}
    with ThreadPoolExecutor(len(ENGINES)) as pool:
        answers = pool.map(lambda e: engine_envs.run_script(pythons[e], script(f"{e}_memory_defaults.py"),
                                                            timeout=timeout), ENGINES)
        return dict(zip(ENGINES, answers, strict=True))
