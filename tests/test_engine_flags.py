"""Every launch command the book shows is checked by that engine's own argument parser.

All engine checks of this module run in one batch (one subprocess per engine, in parallel), made
by the module-scoped `verdicts` fixture. They fail, not skip, when an engine venv is missing, and
are marked `engine_venv`; the normalisation and missing-venv checks need no engine and are fast.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from servelab.book import claims
from servelab.engines import flags
from servelab.machine import engine_envs, profiles

ENGINES = ("vllm", "sglang")
PORT = 8123
SEEDS = claims.seeds_dir()  # the ledger's lookup: $SERVELAB_SEEDS, else shared/seeds in or beside the clone
ARTICLES = {c["id"]: c for c in flags.article_commands()}


UNKNOWN = {
    "vllm": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--no-such-flag", "1"],
    "sglang": ["sglang", "serve", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--no-such-flag", "1"],
}


@pytest.fixture(scope="module")
def verdicts(require_engine) -> dict[tuple, flags.FlagCheck]:
    for engine in ENGINES:
        require_engine(engine)
    commands = {("profile", *key): argv for key, argv in flags.profile_commands(PORT).items()}
    for cid, entry in ARTICLES.items():
        commands[("article", cid, "command")] = entry["command"]
        commands[("article", cid, "corrected")] = entry["corrected"]
    for engine, argv in UNKNOWN.items():
        commands[("unknown", engine)] = argv

    def engine_of(key: tuple) -> str:
        return {"profile": lambda: key[2], "article": lambda: ARTICLES[key[1]]["engine"],
                "unknown": lambda: key[1]}[key[0]]()

    keys = list(commands)
    results = flags.check_commands([(engine_of(k), commands[k]) for k in keys])
    return dict(zip(keys, results, strict=True))


def _explain(result: flags.FlagCheck) -> str:
    return f"{shlex.join(result.argv)}\n  stage: {result.stage}\n  error: {result.error}\n  warnings: {result.warnings}"


# (a) what servelab.engines builds, for every profile and engine (GPU forms parsed in the CPU venvs)
@pytest.mark.engine_venv
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("profile", profiles.names())
def test_profile_commands_accepted(verdicts, profile, engine):
    checked = {k: v for k, v in verdicts.items() if k[:3] == ("profile", profile, engine)}
    assert ("profile", profile, engine, "plain") in checked
    for result in checked.values():
        assert result.ok, _explain(result)
        assert result.error == ""
        assert "--port" in result.argv and str(PORT) in result.argv


# (b) the articles' commands do what `expect` records; the corrected forms are accepted
@pytest.mark.engine_venv
@pytest.mark.parametrize("cid", list(ARTICLES))
def test_article_command_behaves_as_recorded(verdicts, cid):
    entry, result = ARTICLES[cid], verdicts[("article", cid, "command")]
    assert entry["expect"] in ("ok", "error")
    assert result.ok == (entry["expect"] == "ok"), _explain(result)
    if entry["expect"] == "error":
        assert entry["expect_error"] and entry["expect_error"] in result.error, _explain(result)
        assert "\n" not in result.error
    if entry.get("expect_warning"):
        assert any(entry["expect_warning"] in w for w in result.warnings), _explain(result)


@pytest.mark.engine_venv
@pytest.mark.parametrize("cid", list(ARTICLES))
def test_article_corrected_form_accepted(verdicts, cid):
    result = verdicts[("article", cid, "corrected")]
    assert result.ok, _explain(result)
    assert not any("deprecated" in w.lower() for w in result.warnings), _explain(result)


@pytest.mark.engine_venv
def test_sglang_assertion_names_the_violated_rule(verdicts):
    error = verdicts[("article", "sglang-runtime-standalone", "command")].error
    assert re.match(r"AssertionError at sglang/srt/\S+\.py:\d+: assert \(", error), error


# (c) an unknown flag is rejected, by name, with the engine's own one-line argparse error
@pytest.mark.engine_venv
@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_flag_rejected(verdicts, engine):
    result = verdicts[("unknown", engine)]
    assert not result.ok
    assert result.stage == "parse"
    assert "unrecognized arguments: --no-such-flag 1" in result.error, _explain(result)
    assert "\n" not in result.error and "usage:" not in result.error


# (d) a missing engine venv is one clear line, before any subprocess starts
@pytest.mark.parametrize("engine", ENGINES)
def test_missing_engine_env_is_one_clear_line(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))
    with pytest.raises(engine_envs.EngineEnvMissing) as err:
        flags.check(engine, UNKNOWN[engine])
    message = str(err.value)
    assert "\n" not in message
    assert f"no venv of {engine} " in message and "servelab setup --env" in message
    with pytest.raises(engine_envs.EngineEnvMissing):
        flags.check_many(engine, [UNKNOWN[engine], UNKNOWN[engine]])


# normalisation (no engine needed)
@pytest.mark.parametrize(("engine", "argv", "form", "prefix", "args"), [
    ("vllm", ["/x/envs/vllm-cpu/bin/vllm", "serve", "M", "--dtype", "bfloat16"], "serve", ("vllm", "serve"),
     ("M", "--dtype", "bfloat16")),
    ("vllm", ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "M"], "module",
     ("python", "-m", "vllm.entrypoints.openai.api_server"), ("--model", "M")),
    ("vllm", "python -u -m vllm.entrypoints.cli.main serve M", "serve", ("vllm", "serve"), ("M",)),
    ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "M"], "launch_server",
     ("python", "-m", "sglang.launch_server"), ("--model-path", "M")),
    ("sglang", ["SGLANG_USE_CPU_ENGINE=1", "/x/bin/sglang", "serve", "M"], "serve", ("sglang", "serve"), ("M",)),
])
def test_normalise_accepts_typed_and_built_commands(engine, argv, form, prefix, args):
    cmd = flags.normalise(engine, argv)
    assert (cmd.form, cmd.prefix, cmd.args) == (form, prefix, args)


@pytest.mark.parametrize(("engine", "argv"), [
    ("vllm", ["sglang", "serve", "M"]),
    ("sglang", ["python", "-m", "vllm.entrypoints.openai.api_server"]),
    ("vllm", ["vllm", "chat"]),
    ("tgi", ["vllm", "serve", "M"]),
])
def test_normalise_rejects_other_commands(engine, argv):
    with pytest.raises(ValueError):
        flags.normalise(engine, argv)


def test_sglang_hub_ids_are_the_model_values_only():
    cmd = flags.normalise("sglang", ["sglang", "serve", "Org/Target", "--speculative-draft-model-path=Org/Draft",
                                         "--served-model-name", "Org/Other", "--tp-size", "4"])
    assert flags.sglang_hub_ids(cmd) == ["Org/Target", "Org/Draft"]


def test_stand_in_config_follows_model_shapes():
    config = flags.stand_in_config("meta-llama/Meta-Llama-3.1-70B-Instruct")  # renamed on the hub
    assert config is not None and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (80, 8)
    assert flags.stand_in_config("Qwen/Qwen2.5-0.5B-Instruct")["model_type"] == "qwen2"
    assert flags.stand_in_config("nobody/unknown") is None


def _text(path: Path) -> str:
    return " ".join(path.read_text().replace("\\\n", " ").split())


@pytest.mark.parametrize("cid", list(ARTICLES))
def test_article_commands_are_the_articles_own(cid):
    entry = ARTICLES[cid]
    assert entry["engine"] in ENGINES and entry["seeds"] and entry["what"]
    if not SEEDS.is_dir():
        pytest.skip(f"{SEEDS} (the source articles) is not on this machine: set SERVELAB_SEEDS to their folder")
    for seed in entry["seeds"]:
        text = _text(SEEDS / seed)
        if "prose" in entry:
            assert all(flag in text for flag in entry["prose"]), seed
        elif "shown" in entry:
            assert " ".join(entry["shown"].split()) in text, seed
        else:
            assert shlex.join(entry["command"]) in text, seed
