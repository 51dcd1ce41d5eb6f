"""Chapter 07's deployment recipes: the data validates, every flag is explained, and every command shown is
judged by its engine's own parser at the pinned version (engine_venv: one checker process per engine)."""

from __future__ import annotations

import pytest

from servelab.engines import flags
from servelab.machine.model_shapes import known_shapes
from servelab.measure.deploying import recipes
from tests.conftest import pinned_version

BOOK = recipes.load()


@pytest.fixture(scope="module")
def verdicts(require_engine):
    for engine in recipes.ENGINES:
        require_engine(engine)
    return recipes.table(BOOK)


@pytest.mark.engine_venv
def test_every_recipe_is_accepted_by_its_engine_at_the_pinned_version(verdicts, cpu):
    shown = verdicts[verdicts.form == "recipe"]
    assert len(shown) == len(BOOK.recipes)
    bad = shown[~shown.accepted]
    assert bad.empty, bad[["id", "engine's error"]].to_string()
    for engine in recipes.ENGINES:
        versions = set(shown[shown.engine == engine]["checked with"])
        assert len(versions) == 1 and versions.pop().startswith(f"{engine} {pinned_version(cpu.engine_env(engine))}")


@pytest.mark.engine_venv
def test_articles_commands_keep_their_recorded_verdicts(verdicts):
    articles = {c["id"]: c for c in flags.article_commands()}
    rows = verdicts[verdicts.setting == "the articles"]
    for _, row in rows.iterrows():
        if row.form == "corrected":
            assert row.accepted, row.to_dict()
        else:
            assert row.accepted == (articles[row.id]["expect"] == "ok"), row.to_dict()


@pytest.mark.engine_venv
def test_a_recipe_with_a_wrong_flag_is_refused(require_engine):
    require_engine("sglang")
    tp4 = next(r for r in BOOK.recipes if r.id == "sglang-tp4")
    bad = [a if a != "--tp-size" else "--num-gpus" for a in tp4.command]
    result = flags.check("sglang", bad)
    assert not result.ok and "unrecognized arguments: --num-gpus 4" in result.error


def test_every_flag_of_every_shown_command_is_explained():
    assert recipes.unexplained(BOOK) == []
    table = recipes.explanations(BOOK)
    assert {"--gpu-memory-utilization", "--max-model-len", "--max-num-seqs"} <= set(table[table.engine == "vllm"].flag)
    assert {"--mem-fraction-static", "--nnodes", "--dist-init-addr"} <= set(table[table.engine == "sglang"].flag)


def test_each_engine_has_one_gpu_tensor_parallel_and_two_node_recipes():
    for engine in recipes.ENGINES:
        settings = {r.setting for r in BOOK.recipes if r.engine == engine}
        assert {"one GPU", "4 GPUs, tensor parallel", "2 nodes, rank 0", "2 nodes, rank 1"} <= settings
    ray = next(r for r in BOOK.recipes if r.id == "vllm-2node-ray")
    assert "ray" in ray.command and any("ray start" in b for b in ray.before)


def test_flags_of_counts_each_flag_once_and_strips_values():
    assert recipes.flags_of(["vllm", "serve", "M", "--tp", "4", "--x=1", "--tp", "2"]) == ["--tp", "--x"]


@pytest.mark.parametrize(("change", "message"), [
    ({"engine": "tgi"}, "engine is 'tgi'"),
    ({"setting": "moon"}, "setting is 'moon'"),
    ({"command": []}, "command is []"),
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"gpu_gb": 0}, "gpu, gpu_gb are 'H100 80GB', 0"),
])
def test_bad_recipe_is_one_clear_line(change, message):
    raw = {"settings": ["one GPU"], "recipe": [{"id": "x", "engine": "vllm", "setting": "one GPU", "gpu": "H100 80GB",
                                                 "gpu_gb": 80, "command": ["vllm", "serve", "M"], **change}]}
    with pytest.raises(recipes.BadRecipe, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        recipes.parse(raw)
    assert "\n" not in str(err.value)


def test_duplicate_ids_are_refused():
    one = {"id": "x", "engine": "vllm", "setting": "one GPU", "command": ["vllm", "serve", "M"], "gpu": "G",
           "gpu_gb": 24}
    with pytest.raises(recipes.BadRecipe, match="used twice"):
        recipes.parse({"settings": ["one GPU"], "recipe": [one, one]})


@pytest.mark.engine_venv
def test_memory_defaults_come_from_the_engines_own_classes(require_engine, cpu):
    for engine in recipes.ENGINES:
        require_engine(engine)
    got = recipes.memory_defaults(cpu)
    vllm, sglang = got["vllm"], got["sglang"]
    assert vllm["version"] == pinned_version(cpu.engine_env("vllm")).split("+")[0]
    assert 0 < vllm["fields"]["CacheConfig.gpu_memory_utilization"]["default"] <= 1
    assert vllm["request_memory_is_total_times_fraction"] is True
    assert all(n >= vllm["fields"]["SchedulerConfig.max_num_seqs"]["default"]
               for n in vllm["serve_max_num_seqs_by_cuda_device"].values())
    assert sglang["fields"]["Schedule.mem_fraction_static"]["default"] is None
    assert "(model weights + KV cache pool) / GPU memory capacity" in sglang["definition"]
    assert all(sglang["code"].values()), sglang["code"]


LLAMA_8B, LLAMA_70B = (known_shapes()[f"meta-llama/Llama-3.1-{n}-Instruct"] for n in ("8B", "70B"))


def test_fit_counts_weights_and_one_full_request_per_gpu():
    one = recipes.fit(LLAMA_8B, tp=1, pp=1, max_model_len=32768, share=0.9, gpu_gb=24)
    assert one["weights_gib"] == pytest.approx(8.03e9 * 2 / 2**30)
    assert one["kv_gib"] == pytest.approx(4.0)  # 32 layers x 8 KV heads x 128 x K,V x 2 bytes = 128 KiB a token
    assert one["budget_gib"] == pytest.approx(0.9 * 24e9 / 2**30) and one["fits"]
    assert not recipes.fit(LLAMA_8B, tp=1, pp=1, max_model_len=32768, share=0.9, gpu_gb=16)["fits"]
    split = recipes.fit(LLAMA_70B, tp=4, pp=2, max_model_len=32768, share=0.9, gpu_gb=40)
    assert split["kv_gib"] == pytest.approx(1.25)  # 40 layers x 2 KV heads per GPU
    assert recipes.fit(LLAMA_70B, tp=16, pp=1, max_model_len=1024, share=0.9, gpu_gb=40)["kv_gib"] > 0  # >= 1 head
    with pytest.raises(ValueError, match="share=1.5"):
        recipes.fit(LLAMA_8B, tp=1, pp=1, max_model_len=1, share=1.5, gpu_gb=24)


def test_every_recipe_fits_the_gpu_it_names_and_the_two_node_model_needs_two_nodes():
    fits = recipes.memory_fit(BOOK).set_index("id")
    assert fits.fits.all(), fits[~fits.fits].to_string()
    assert set(fits.index) == {r.id for r in BOOK.recipes} and all(r.gpu for r in BOOK.recipes)
    assert fits.loc["sglang-2node-rank0", ["tp", "pp"]].tolist() == [4, 2]  # pipeline across the nodes
    for rid in ("vllm-2node-mp-rank0", "sglang-2node-rank0"):
        assert not recipes.refit(BOOK, rid, tp=4, pp=1)["fits"]
    with pytest.raises(recipes.BadRecipe, match="no recipe 'x'"):
        recipes.refit(BOOK, "x", tp=1, pp=1)
