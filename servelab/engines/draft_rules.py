"""Which draft/target pairs each engine accepts: its own vocabulary rules, named by file and function.

A draft proposes token ids that the target verifies, so both must mean the same thing by each id.
The engines check this at start by different rules: vLLM while it builds its config (from the
draft's config.json), SGLang once the draft is loaded (after its download):

- vLLM's ``draft_model`` method compares config.json's ``vocab_size`` of target and draft and
  refuses a difference (``SpeculativeConfig.verify_equal_vocab_size_if_draft_model``), unless
  ``use_heterogeneous_vocab`` is set, which only ``draft_model`` accepts, with greedy draft
  sampling only (``SpeculativeConfig._verify_args``). EAGLE heads and n-gram lookup are not compared.
- SGLang's ``STANDALONE`` refuses different vocab sizes, and equal sizes whose tokenizers map
  tokens to different ids (``StandaloneWorkerV2._validate_vocab_compatibility``). ``EAGLE`` and
  ``EAGLE3`` heads borrow the target's embedding and are not compared, except under
  ``speculative_use_rejection_sampling``, which needs the draft to predict over the whole target
  vocabulary, which an EAGLE-3 head with a reduced ``draft_vocab_size`` does not
  (``EagleDraftWorker.alloc_memory_pool``). ``NGRAM`` has no draft model.

:func:`pair_problems` applies these rules in the kernel, to the vocabularies in
servelab/data/model_shapes.toml (or a model folder's config.json), before any download.
:func:`engine_verdicts` runs the engines' own two comparisons (engine-side
``draft_vocab_rules.py``, on stand-in objects), and :data:`RULES` records each rule's key lines,
which :func:`missing_key_lines` looks for in an installed engine's source: a release that changes a
rule fails the tests rather than this module going stale silently.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.engines.engine_side import script
from servelab.machine import engine_envs, model_shapes, models
from servelab.machine.model_shapes import Vocabulary

ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM")  # the ones whose rules are recorded here


@dataclass(frozen=True)
class Rule:
    """One engine check: where it is (a file under site-packages, Class.function) and its key lines."""

    engine: str
    file: str
    function: str
    key_lines: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.file}::{self.function}"


VLLM_METHOD = Rule("vllm", "vllm/config/speculative.py", "SpeculativeConfig.__post_init__",
                   ('self.method = "draft_model"', 'elif "eagle-" in self.draft_model_config.model.lower():',
                    'elif "eagle3" in self.draft_model_config.model.lower():'))
VLLM_EQUAL = Rule("vllm", "vllm/config/speculative.py", "SpeculativeConfig.verify_equal_vocab_size_if_draft_model",
                  ('self.method == "draft_model"', "if target_vocab_size != draft_vocab_size:"))
VLLM_ARGS = Rule("vllm", "vllm/config/speculative.py", "SpeculativeConfig._verify_args",
                 ("if self.use_heterogeneous_vocab and not self.uses_draft_model():",
                  'if self.use_heterogeneous_vocab and self.draft_sample_method != "greedy":',
                  "if not self.use_heterogeneous_vocab:", "self.verify_equal_vocab_size_if_draft_model()"))
SGL_STANDALONE = Rule("sglang", "sglang/srt/speculative/standalone_worker_v2.py",
                      "StandaloneWorkerV2._validate_vocab_compatibility",
                      ("if target_vocab_size != draft_vocab_size:",
                       "and target_tokenizer.get_vocab() != draft_tokenizer.get_vocab()"))
SGL_REJECTION = Rule("sglang", "sglang/srt/speculative/eagle_worker_v2.py", "EagleDraftWorker.alloc_memory_pool",
                     ("if get_spec().speculative_use_rejection_sampling:", "self.hot_token_id.shape[0]",
                      "if draft_vocab_size != target_vocab_size:"))
SGL_HOT_TOKENS = Rule("sglang", "sglang/srt/models/llama_eagle3.py", "LlamaForCausalLMEagle3.load_weights",
                      ('if "d2t" in name:', "self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])"))
SGL_CONTEXT = Rule("sglang", "sglang/srt/configs/model_config.py", "ModelConfig._derive_context_length",
                   ("envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get()",))
CONTEXT_OVERRIDE = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
RULES = (VLLM_METHOD, VLLM_EQUAL, VLLM_ARGS, SGL_STANDALONE, SGL_REJECTION, SGL_HOT_TOKENS, SGL_CONTEXT)


def _vocabulary(name: str) -> Vocabulary | None:
    """A hub id's vocabulary (model_shapes.toml), or a model folder's (``local:NAME`` or a path)."""
    if name.startswith("local:"):
        name = str(models.local_dir(name.removeprefix("local:")))
    return model_shapes.vocabulary(name)


def _size(name: str) -> str:
    known = _vocabulary(name)
    return f"vocab_size {known.vocab_size}" if known else "vocab_size not known"


def _pair(target: str, draft: str | None) -> str:
    drafted = f"draft {draft} ({_size(draft)})" if draft else "no draft model"
    return f"{drafted} for target {target} ({_size(target)})"


def _vocabularies(engine: str, rule: Rule, *names: str | None) -> list[Vocabulary] | str:
    """Each model's vocabulary, or the one line that says which is not known."""
    found = [_vocabulary(name) if name else None for name in names]
    for name, known in zip(names, found, strict=True):
        if known is None:
            return (f"{ENGINES[engine]}: no vocab_size known for {name!r} (not a model folder, not in "
                    f"servelab/data/model_shapes.toml), so {rule.where} cannot be applied; add config.json's "
                    "vocab_size there")
    return [v for v in found if v is not None]


def _vllm(target: str, config: Mapping) -> list[str]:
    model = config.get("model")
    method = config.get("method") or ("ngram" if model in ("ngram", "[ngram]") else "draft_model")
    if method == "draft_model" and model:  # vLLM renames it after the draft's name
        method = "eagle" if "eagle-" in model.lower() else "eagle3" if "eagle3" in model.lower() else method
    hetero, sampling = bool(config.get("use_heterogeneous_vocab")), config.get("draft_sample_method", "greedy")
    pair = _pair(target, model)
    if hetero and method != "draft_model":
        return [f"vLLM {method} refuses use_heterogeneous_vocab, {pair}: only method='draft_model' takes it "
                f"({VLLM_ARGS.where} raises ValueError)"]
    if hetero and sampling != "greedy":
        return [f"vLLM draft_model with use_heterogeneous_vocab refuses draft_sample_method={sampling!r}, {pair}: "
                f"greedy draft sampling only ({VLLM_ARGS.where} raises ValueError)"]
    if hetero or method != "draft_model":
        return []  # a vocabulary of its own allowed, or a head or prompt lookup: nothing compared
    found = _vocabularies("vllm", VLLM_EQUAL, target, model)
    if isinstance(found, str):
        return [found]
    if found[0].vocab_size == found[1].vocab_size:
        return []
    return [f"vLLM draft_model refuses {pair} unless use_heterogeneous_vocab is set: the vocab sizes differ "
            f"({VLLM_EQUAL.where} raises ValueError)"]


def _sglang(target: str, options: Mapping) -> list[str]:
    algorithm = str(options["speculative_algorithm"]).upper()
    if algorithm not in SGLANG_ALGORITHMS:
        raise ValueError(f"no draft/target rule recorded for SGLang's {algorithm!r}; "
                         f"known: {', '.join(SGLANG_ALGORITHMS)}")
    rejection = bool(options.get("speculative_use_rejection_sampling"))
    if algorithm == "NGRAM" or (algorithm != "STANDALONE" and not rejection):
        return []  # no draft model, or a head that drafts in the target's embedding: nothing compared
    rule = SGL_STANDALONE if algorithm == "STANDALONE" else SGL_REJECTION
    draft = options.get("speculative_draft_model_path")
    found = _vocabularies("sglang", rule, target, draft)
    if isinstance(found, str):
        return [found]
    (t, d), pair = found, _pair(target, draft)
    if algorithm == "STANDALONE":
        if t.vocab_size != d.vocab_size:
            return [f"SGLang STANDALONE refuses {pair}: the vocab sizes differ ({rule.where} raises ValueError)"]
        if t.tokenizer and d.tokenizer and t.tokenizer != d.tokenizer:
            return [f"SGLang STANDALONE refuses {pair}: equal sizes, but tokenizers {t.tokenizer} and "
                    f"{d.tokenizer} map tokens to different ids ({rule.where} raises ValueError)"]
        return []
    if algorithm == "EAGLE" and options.get("speculative_token_map"):
        return [f"SGLang EAGLE with speculative_use_rejection_sampling refuses a speculative_token_map (a reduced "
                f"vocabulary), {pair} ({rule.where} raises ValueError unless the map has {t.vocab_size} tokens)"]
    hot = d.draft_vocab_size if algorithm == "EAGLE3" else t.vocab_size  # an EAGLE-3 head's d2t map
    if hot == t.vocab_size:
        return []
    return [f"SGLang {algorithm} with speculative_use_rejection_sampling refuses {pair}: the head predicts "
            f"over its draft_vocab_size of {hot} tokens, not the target's {t.vocab_size} ({rule.where} raises "
            f"ValueError; {SGL_HOT_TOKENS.where} reads the head's d2t map)"]


def pair_problems(engine: str, target: str, options: Mapping) -> list[str]:
    """One line per reason ``engine`` refuses to start ``target`` with these speculative ``options``
    (servelab launch options: vLLM's ``{"speculative_config": {...}}``, SGLang's ``speculative_*``
    flags); empty when it accepts them. ``target`` and the draft are hub ids of model_shapes.toml or
    model folders."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    options = {str(k).replace("-", "_"): v for k, v in options.items()}  # flags as options or as profile keys
    if engine == "vllm":
        config = options.get("speculative_config")
        return _vllm(target, json.loads(config) if isinstance(config, str) else config) if config else []
    return _sglang(target, options) if options.get("speculative_algorithm") else []


def context_problems(engine: str, options: Mapping, context_length: int, env: Mapping[str, str]) -> list[str]:
    """SGLang gives its draft worker the target's context length; a draft whose config.json allows fewer positions
    is refused (SGL_CONTEXT) unless the server's environment sets CONTEXT_OVERRIDE=1. vLLM raises a draft's limit
    to the target's itself (SpeculativeConfig._maybe_override_draft_max_position_embeddings): nothing to check."""
    options = {str(k).replace("-", "_"): v for k, v in options.items()}
    draft = options.get("speculative_draft_model_path")
    if engine != "sglang" or not draft or env.get(CONTEXT_OVERRIDE) == "1":
        return []
    shape = model_shapes.known_shapes().get(draft)
    if shape is None or not shape.max_position_embeddings or shape.max_position_embeddings >= context_length:
        return []
    return [f"SGLang refuses the draft {draft}: its config.json allows {shape.max_position_embeddings} positions, "
            f"the target's context is {context_length} ({SGL_CONTEXT.where} raises ValueError unless the server's "
            f"environment sets {CONTEXT_OVERRIDE}=1)"]


def gated_models(models: Iterable[str]) -> list[str]:
    """The hub ids among ``models`` gated on the Hugging Face hub (servelab/data/model_shapes.toml)."""
    return model_shapes.gated(models)


def engine_verdicts(engine: str, pairs: Sequence[tuple[str, str]], python: Path) -> list[str]:
    """For each (target, draft) pair of known models: the message of the ValueError the engine's own
    check raises ("" when it accepts), run with ``python`` of that engine's venv on stand-in objects:
    vLLM's draft_model check (use_heterogeneous_vocab not set), or SGLang's STANDALONE one."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    cases = []
    for target, draft in pairs:
        t, d = _vocabulary(target), _vocabulary(draft)
        if t is None or d is None:
            raise ValueError(f"no vocab_size known for {target if t is None else draft!r}")
        cases.append({"method": "draft_model" if engine == "vllm" else "STANDALONE", "target_vocab": t.vocab_size,
                      "draft_vocab": d.vocab_size, "target_tokenizer": t.tokenizer, "draft_tokenizer": d.tokenizer})
    report = engine_envs.run_script(python, script("draft_vocab_rules.py"), env=engine_envs.cpu_only_env(),
                                    stdin=json.dumps({"engine": engine, "cases": cases}), timeout=300)
    return list(report["errors"])


def rule_source(rule: Rule, site_packages: Path) -> str | None:
    """The source of ``rule``'s function in an installed engine (None when the file or function is gone)."""
    path = site_packages / rule.file
    if not path.is_file():
        return None
    text = path.read_text()
    nodes: list[ast.AST] = [ast.parse(text)]
    for part in rule.function.split("."):
        nodes = [n for parent in nodes for n in ast.iter_child_nodes(parent)
                 if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == part]
    return ast.get_source_segment(text, nodes[0]) if nodes else None


def missing_key_lines(rule: Rule, site_packages: Path) -> list[str]:
    """The key lines of ``rule`` that its function in this install no longer has (all when it is gone)."""
    source = rule_source(rule, site_packages)
    return list(rule.key_lines) if source is None else [k for k in rule.key_lines if k not in source]
