"""Chapter 07's deployment recipes (servelab/data/recipes.toml), judged by the engines' own parsers.

A recipe is a launch command for one setting (one GPU, four GPUs with tensor parallelism, two nodes);
the articles' commands and their corrected forms come from article_commands.toml. `table` checks every
command with `servelab.engines.flags` (the engine's real entry point and argument classes, at the
version installed in its venv) and returns one row per command with the parser's verdict. A parser only
checks flags; `memory_fit` checks what it does not: that the weights and one request of the full context
fit the memory share each recipe gives its engine on the GPU the recipe names (a necessary condition:
activations and CUDA graphs need room on top of it).
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
from servelab.machine.model_shapes import GIB, ModelShape, dtype_bytes, known_shapes
from servelab.machine.profiles import Profile

DATA_FILE = "recipes.toml"
ENGINES = ("vllm", "sglang")
_KEYS = {"id", "engine", "setting", "command", "source", "note", "before", "gpu", "gpu_gb"}


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
    gpu: str = ""  # the GPU it is written for, e.g. "H100 80GB"
    gpu_gb: float = 0.0  # that GPU's memory, nominal decimal GB (10**9 bytes)


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
        gpu, gb = raw.get("gpu"), raw.get("gpu_gb")
        if not isinstance(gpu, str) or not gpu or isinstance(gb, bool) or not isinstance(gb, int | float) or gb <= 0:
            raise BadRecipe(f"{where}: gpu, gpu_gb are {gpu!r}, {gb!r}; accepted: a GPU name and its memory in GB > 0")
        if raw["id"] in seen:
            raise BadRecipe(f"{where}: id {raw['id']!r} is used twice; accepted: a unique id")
        seen.add(raw["id"])
        recipes.append(Recipe(raw["id"], raw["engine"], raw["setting"], tuple(command), raw.get("source", ""),
                              raw.get("note", ""), tuple(raw.get("before", ())), gpu, float(gb)))
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


# Each engine's flags for the memory share, the context length, and the two kinds of parallelism.
SHARE = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}
LENGTH = {"vllm": "--max-model-len", "sglang": "--context-length"}
TP = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size"}
PP = {"vllm": "--pipeline-parallel-size", "sglang": "--pp-size"}


def fit(shape: ModelShape, *, tp: int, pp: int, max_model_len: int, share: float, gpu_gb: float,
        dtype: str = "bfloat16") -> dict:
    """Per GPU, in GiB: the weights (parameters / (tp x pp)), the KV cache of one request of `max_model_len`
    (its layers / pp, its KV heads / tp, at least one each), and the budget `share` x the GPU's memory;
    `fits` when weights + KV <= budget (necessary, not sufficient: activations come on top)."""
    if tp < 1 or pp < 1 or max_model_len < 1 or not 0 < share <= 1 or gpu_gb <= 0 or shape.params_b <= 0:
        raise ValueError(f"need tp, pp, max_model_len >= 1, 0 < share <= 1, gpu_gb > 0 and a parameter count; "
                         f"got tp={tp}, pp={pp}, max_model_len={max_model_len}, share={share}, gpu_gb={gpu_gb}, "
                         f"params_b={shape.params_b}")
    weights = shape.params_b * 1e9 * dtype_bytes(dtype) / (tp * pp) / GIB
    layers, heads = -(-shape.num_hidden_layers // pp), -(-shape.num_key_value_heads // tp)
    kv = 2 * layers * heads * shape.head_dim * dtype_bytes(dtype) * max_model_len / GIB
    budget = share * gpu_gb * 1e9 / GIB
    return {"weights_gib": weights, "kv_gib": kv, "budget_gib": budget, "headroom_gib": budget - weights - kv,
            "fits": weights + kv <= budget}


def _value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def recipe_model(recipe: Recipe) -> str:
    """The model a recipe serves: `vllm serve MODEL`, or SGLang's --model-path."""
    return recipe.command[2] if recipe.engine == "vllm" else str(_value(recipe.command, "--model-path"))


def memory_fit(book: Book, shapes: dict[str, ModelShape] | None = None) -> pd.DataFrame:
    """`fit` for every recipe on the GPU it names, from the shapes in model_shapes.toml."""
    shapes = shapes or known_shapes()
    rows = []
    for r in book.recipes:
        model, share, length = recipe_model(r), _value(r.command, SHARE[r.engine]), _value(r.command, LENGTH[r.engine])
        if model not in shapes or share is None or length is None:
            raise BadRecipe(f"{r.id}: memory_fit needs a model in model_shapes.toml ({model!r}), "
                            f"{SHARE[r.engine]} ({share!r}) and {LENGTH[r.engine]} ({length!r})")
        tp, pp = int(_value(r.command, TP[r.engine]) or 1), int(_value(r.command, PP[r.engine]) or 1)
        rows.append({"id": r.id, "model": model, "gpu": r.gpu, "GPUs": tp * pp, "tp": tp, "pp": pp,
                     "share": float(share),
                     "max_model_len": int(length), **fit(shapes[model], tp=tp, pp=pp, max_model_len=int(length),
                                                         share=float(share), gpu_gb=r.gpu_gb)})
    return pd.DataFrame(rows)



def refit(book: Book, recipe_id: str, *, tp: int, pp: int, shapes: dict[str, ModelShape] | None = None) -> dict:
    """`fit` for a recipe's model, GPU, share and length with other parallel sizes (e.g. a two-node recipe
    folded onto one node: pp=1)."""
    rows = memory_fit(book, shapes).set_index("id")
    if recipe_id not in rows.index:
        raise BadRecipe(f"no recipe {recipe_id!r}; accepted: {', '.join(rows.index)}")
    r, recipe = rows.loc[recipe_id], next(x for x in book.recipes if x.id == recipe_id)
    shape = (shapes or known_shapes())[r.model]
    return {"tp": tp, "pp": pp, **fit(shape, tp=tp, pp=pp, max_model_len=int(r.max_model_len),
                                      share=float(r.share), gpu_gb=recipe.gpu_gb)}
