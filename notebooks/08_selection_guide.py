# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A selection guide from this book's measurements
#
# The source articles this book checks end with a table: pick vLLM for this job, SGLang for that
# one. Such a guide is only as good as the measurements behind it, and the articles show none (the
# book's [claims ledger](../book/claims.md) lists each of their claims with a verdict: true, false,
# outdated or unverifiable). This chapter builds the guide from what chapters 04 to 07 measured and
# saved, with a written rule for when a row may favour an engine.
#
# It starts no engine: it reads the results the earlier chapters saved for your *profile* (the
# book's settings for one kind of machine: cpu, or a GPU profile) in the `results/<profile>/`
# folder, and runs in seconds. So after you run chapters 04 to 07 on your own GPU, run this chapter
# again and the guide is the one for your hardware.

# %% tags=["parameters"]
profile = "auto"
tie = 0.10                     # a vLLM/SGLang ratio within this share of 1 favours neither engine

# %%
import pandas as pd
from matplotlib import pyplot as plt

from servelab.book import banner, plots, results
from servelab.book import selection_guide as sg
from servelab.book import selection_guide_exercises as answers
from servelab.book.claims import load as load_ledger
from servelab.book.i18n import N_, t
from servelab.measure.rounds import chance_of_agreement

prof = banner.start(profile)
folder = sg.results_folder(prof)

# %% [markdown]
# ## The rule, in a picture
#
# Five rows compare the two engines on one number from [chapter 07](07_choosing_and_deploying.ipynb)'s
# runs: the median request latency (from sending a request to its last token; lower is better) or
# the output throughput (tokens generated per second; higher is better). Chapter 07 ran each
# workload in several *rounds*, the engines taking turns, so each row has one vLLM/SGLang ratio per
# round. A row favours an engine only when two things hold:
#
# 1. the median round's ratio is more than 10% from 1 (the `tie` parameter above), and
# 2. every round favours the same engine: each round's ratio lies on the same side of 1.
#
# The figure draws that rule. Each bar runs from the round where vLLM did worst to the one where it
# did best, the dot is the median round, and the grey band is the tie. Right of 1, vLLM did better;
# left of 1, SGLang did (a time is turned round, SGLang's over vLLM's, so that every row reads the
# same way; each band is a little wider on one side, a time's toward vLLM and a throughput's toward
# SGLang, since the tie applies to the vLLM/SGLang ratio as measured). A row favours an engine only
# if its dot lies outside the band and its whole bar on one side of 1.
#
# On the cpu profile the guide favours no engine with these bars, whichever side they lie on, and
# the figure draws them in grey. Chapter 07 explains why: there SGLang runs without its CPU kernels,
# on slower generic code, while vLLM runs compiled CPU kernels, so the ratios compare two CPU
# set-ups, not the engines. On a GPU profile the same bars decide the rows.

# %%
ratios = sg.timing_ratios(folder)
shown = sg.advantage(ratios, tie)
colour = "0.55" if prof.is_cpu else "tab:blue"
fig, ax = plt.subplots(figsize=(9.5, 0.9 + 0.55 * max(len(shown), 1)))
for y, (_, row) in enumerate(shown.iterrows()):
    ax.fill_betweenx([y - 0.35, y + 0.35], row["band low"], row["band high"], color="0.88", lw=0)
    ax.plot([row.lowest, row.highest], [y, y], color=colour, lw=3)
    ax.plot(row["median"], y, "o", color=colour)
ax.axvline(1, color="0.3", lw=0.8)
ax.set_xscale("log")
reach = max([2.0, *shown.highest, *(1 / shown.lowest)]) * 1.1  # symmetric on the log axis: 1 in the middle
ax.set_xlim(1 / reach, reach)
marks = [m for m in (1 / 4, 1 / 3, 1 / 2, 2 / 3, 1, 1.5, 2, 3, 4) if 1 / reach <= m <= reach]
ax.set_xticks(marks, [f"{m:.2g}" for m in marks])
ax.xaxis.set_minor_locator(plt.NullLocator())
ax.set_yticks(range(len(shown)), [t(s) for s in shown.situation])
for y, metric in enumerate(shown.metric):  # what each row compares, in small print above its bar
    ax.text(1 / reach * 1.03, y - 0.42, t(sg.METRIC_NAMES[metric]), fontsize=7.5, color="0.35", va="bottom")
ax.invert_yaxis()
title = N_("Chapter 07's runs, every round")
if prof.is_cpu:
    title = N_("Chapter 07's runs, every round (cpu: not indicative)")
plots.axes(title, "vLLM / SGLang, turned so that above 1 vLLM did better", "", ax=ax)
ax.set_ylim(len(shown) - 0.5, -1.2)  # room above the first row for the two directions
ax.text(0.01, 0.98, t("← SGLang did better"), transform=ax.transAxes, ha="left", va="top", fontsize=9)
ax.text(0.99, 0.98, t("vLLM did better →"), transform=ax.transAxes, ha="right", va="top", fontsize=9)
ax.legend(handles=[plt.Line2D([], [], color=colour, marker="o", ls="", label=t("median round")),
                   plt.Line2D([], [], color=colour, lw=3, label=t("lowest to highest round")),
                   plt.Rectangle((0, 0), 1, 1, color="0.88", label=t("the tie"))],
          loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
plt.show()

# %% [markdown]
# ## The rule, built small
#
# The rule is a few lines of code. `lean` takes one ratio; `lean_over_rounds` adds the second
# condition, that every round agrees. Here they run on made-up ratios, then on the first row above,
# as a GPU profile would read it (on cpu the guide writes "not indicative" instead). The last line
# says how often all rounds would agree by chance alone, if the engines were equally fast and each
# round a coin toss: agreement is evidence, but with few rounds not strong evidence, which is why
# the median must also clear the tie.

# %%
print(sg.lean(0.82))                            # vLLM takes 18% less time: vLLM
print(sg.lean(1.05))                            # 5% apart: within the tie
print(sg.lean(1.70, lower_is_better=False))     # vLLM's throughput is 70% higher: vLLM
if len(ratios):
    first = ratios.iloc[0]
    print(f"{first.situation}: {sg.lean_over_rounds(first, first['lower is better'], tie)}")
    n = int(ratios["rounds"].min())
    print(f"{n} rounds: all on one side by chance alone {chance_of_agreement(n):.0%} of the time")

# %% [markdown]
# The chance that every round lands on one side of 1 by luck alone halves with each round added. The
# figure shows it for two to eight rounds, with this run's number of rounds marked.

# %%
counts = list(range(2, 9))
ax = plots.axes("All rounds on one side of 1 by chance alone (engines equally fast)", "rounds",
                "chance (%)")
ax.bar(counts, [100 * chance_of_agreement(c) for c in counts], color="0.75")
if len(ratios):
    ax.bar([n], [100 * chance_of_agreement(n)], color="tab:blue", label=t("this run"))
    ax.legend()
plt.show()

# %% [markdown]
# ## The guide
#
# Each row names a situation, what was measured, the engine it favours ("leaning") and where the
# evidence is: a chapter's section and the result file it read, or a row of the ledger. The table
# gives the ratios as measured, vLLM's value over SGLang's, so a time below 1 means vLLM took less
# (the figure turned times round). A row's words come from the chapter it names; open that chapter
# for a term such as TTFT (time to first token, chapter 01), the KV cache (the memory an engine
# keeps for the tokens it has processed, chapter 02), a prefix-cache hit rate (chapter 04), a
# stall (chapter 05) or a speculative method (chapter 06).

# %%
selection = sg.guide(folder, prof, load_ledger(), tie=tie)
results.save("selection_guide", selection, prof, tie=tie)
for _, row in selection.iterrows():
    print(f"{row.situation}\n  {t('measured')}: {row.measured}\n  {t('leaning')}: {row.leaning}\n"
          f"  {t('evidence')}: {row.evidence}")

# %% [markdown]
# Read it as where to start, not as a verdict: each row is a few rounds on one machine, and the
# leaning is the measured direction, not a margin that would hold on another model or GPU. Two rows
# can point different ways for the same workload: a prefix-cache hit rate counts cached tokens
# only, while a latency includes everything else each engine spends per step. So a hit-rate row may
# lean even on the cpu profile, where no engine-against-engine timing does.
#
# The latency rows lean on the median request latency and show the median TTFT beside it: a
# request's latency includes its TTFT and all of its decoding, so it is what a user waiting for the
# whole answer feels. Two rows apply the tie in their own way. The hit-rate row compares the share
# of prompt tokens each engine found in its cache on its second pass over a set of documents
# (chapter 04 calls the pass a "round"; it is not one of chapter 07's rounds). It leans where the
# ratio of the two hit rates, vLLM's over SGLang's, is more than 10% from 1; a hit rate counts
# tokens, not time, so it does not depend on the machine's speed, and it may lean on the cpu
# profile. The
# chunked-prefill row compares the longest pause in other users' streams ("stall") at each engine's
# smallest chunk budget (the most prompt tokens one step may process, chapter 05): vLLM against
# SGLang's set-up that stalled less, its default or `--enable-mixed-chunk`. On a GPU profile it
# leans only where the two engines' rounds do not overlap.
#
# Three kinds of row do not favour an engine, and say why in their leaning column: engine-against-engine
# timings on the cpu profile (above); rows that rest on a ledger verdict alone, since a verdict on
# an article's sentence is not a measurement; and the speculative-decoding row, which compares
# speculation on and off within vLLM, so it says whether speculation helps or hurts instead.
#
# :::{dropdown} How we know: which rows lean, and why
# Each row reads a result saved by a chapter on this profile or a verdict in the ledger, and leans to
# an engine only where the measured ratio is more than `tie` from even (`lean` and `lean_over_rounds`
# in `servelab/book/selection_guide.py`). The head-to-head rows also need every round to favour that
# engine (`ratio_spread` in `servelab/measure/deploying/head_to_head.py`). The chunked-prefill row
# compares the longest stall of vLLM with SGLang's better set-up, and on a GPU profile leans only where
# the two engines' rounds do not overlap (they ran in different rounds), when chapter 05 saved its
# rounds (`chunked_prefill_rounds.csv`; without them it leans on the medians alone). The speculative row reports
# chapter 06's speedups with the lowest and highest of its interleaved rounds, and says "helps" or
# "hurts" only where every round agrees. The shared-prefix row leans on chapter 07's shared-prefix run
# and gives chapter 04's hit rates as context. On another profile the same cell reads that profile's
# results; a chapter not yet run there leaves its rows out.
# :::
#
# :::{dropdown} How we know: the figure and the table repeat the saved numbers
# The check below reads the saved files again with pandas, apart from the guide's code: it picks
# chapter 07's runs itself (the random prompts at the fewest and the most requests in flight, and
# the shared-prefix, multi-turn and long-prompt runs) and prints four values, in this order. `figure`: the
# figure draws those runs, with the median, lowest and highest round of their per-round vLLM/SGLang
# ratios in `head_to_head.csv`, turned as the text says, and the tie's band. `leanings`: the rule
# applied to those ratios gives what the guide's code gives, and the guide's column shows it (on the
# cpu profile every row must say "not indicative"). `speculative`: the speculative row names the
# method with the highest speedup at chapter 06's smallest load in `speculative_summary.csv`.
# `cited`: every chapter whose results this profile holds is cited in the evidence column. Where a
# chapter has not been run on a profile its value prints "n/a", as its rows are left out.
# :::
#
# :::{dropdown} How we know: where the articles' guide and this one disagree
# Where the articles' guide (ledger rows `guide-vllm-for-rag`, `guide-sglang-for-json`,
# `guide003-vllm-under-memory-pressure`, `guide003-chat-sglang-api-vllm`) and this one disagree, the
# evidence column says which cell or ledger row to open: the first two rows answer
# `guide003-chat-sglang-api-vllm`, the shared-prefix row `guide-vllm-for-rag`.
# :::

# %%
# NBVAL_CHECK_OUTPUT
# The saved files read again with pandas, apart from the guide's code; a chapter not run on this profile is left out.
def saved(name: str) -> pd.DataFrame | None:
    return pd.read_csv(folder / name) if (folder / name).is_file() else None


checks = {}
if (h2h := saved("head_to_head.csv")) is not None and "round" in h2h:
    vllm_runs = h2h[h2h.engine == "vllm"].drop_duplicates("run")
    swept = vllm_runs[vllm_runs.workload == "random"].dropna(subset=["concurrency"]).sort_values("concurrency")
    picked = ([(r, "p50_e2el_ms") for r in swept.run.iloc[:1]] + [(r, "output_throughput") for r in swept.run.iloc[-1:]]
              + [(r, "p50_e2el_ms") for w in ("shared_prefix", "multi_turn", "long_prompt")
                 for r in vllm_runs[vllm_runs.workload == w].run.iloc[:1]])
    per_round = h2h.pivot_table(index=["run", "round"], columns="engine", values=["p50_e2el_ms", "output_throughput"])
    again = {(run, m): (per_round[(m, "vllm")] / per_round[(m, "sglang")]).xs(run, level="run") for run, m in picked}
    rows = {(r.run, r.metric): (r, d) for (_, r), (_, d) in zip(ratios.iterrows(), shown.iterrows(), strict=True)}

    def drawn(values: pd.Series, lower_is_better: bool) -> list[float]:  # median, lowest, highest, band, as drawn
        turn = (lambda x: 1 / x) if lower_is_better else (lambda x: x)
        ends = sorted([turn(values.min()), turn(values.max())])
        return [turn(values.median()), *ends, *sorted([turn(1 - tie), turn(1 + tie)])]

    # the figure draws these runs: their median, lowest and highest round, and the tie, turned as the text says
    checks["figure"] = set(rows) == set(again) and all(
        max(abs(a - b) for a, b in zip(drawn(v, k[1] != "output_throughput"),
                                       rows[k][1][["median", "lowest", "highest", "band low", "band high"]],
                                       strict=True)) < 1e-9 for k, v in again.items())

    def by_the_rule(values: pd.Series, lower_is_better: bool) -> str:  # the rule, on the raw per-round ratios
        ahead = values < 1 if lower_is_better else values > 1
        if abs(values.median() - 1) <= tie or not (ahead.all() or (~ahead).all()):
            return "either"
        return "vLLM" if ahead.all() else "SGLang"

    said = selection.set_index("situation").leaning
    # the guide's rule gives what the raw ratios give, on every profile; the guide's column shows it (on the cpu
    # profile: "not indicative", in every row)
    checks["leanings"] = checks["figure"] and all(
        sg.lean_over_rounds(rows[k][0], rows[k][0]["lower is better"], tie).split(" ")[0] == r
        and (said[rows[k][0].situation] == sg.NOT_INDICATIVE if prof.is_cpu
             else said[rows[k][0].situation].split(" ")[0] == r)
        for k, r in ((k, by_the_rule(v, k[1] != "output_throughput")) for k, v in again.items()))
if (summary := saved("speculative_summary.csv")) is not None:
    loads = {int(c.split(", ")[-1].split()[0]): c for c in summary if c.startswith("speedup, ") and "request" in c}
    at = [f"{what}, {loads[b].removeprefix('speedup, ')}" for b in (min(loads), max(loads))
          for what in ("speedup", "lowest round", "highest round")]
    best = summary.dropna(subset=at).set_index("method")[loads[min(loads)]].idxmax()
    # the speculative row names chapter 06's fastest method at its smallest load
    checks["speculative"] = bool(selection.measured.str.contains(f": {best}, speedup", regex=False).any())
holds = {"04": "prefix_verdict.csv", "05": "chunked_prefill_live.csv", "06": "speculative_summary.csv",
         "07": "head_to_head.csv"}
# every chapter whose results this profile holds is cited in the evidence column
checks["cited"] = all(selection.evidence.str.contains(f"chapter {c}").any() for c, f in holds.items()
                      if (folder / f).is_file())
print(*(checks.get(name, "n/a") for name in ("figure", "leanings", "speculative", "cited")))  # n/a: not run here

# %% [markdown]
# ## What to remember
#
# - **A guide row is only as good as its measurement.** Each row here names the result file or the
#   ledger row it rests on; open it before you act on the row.
# - **Favour an engine only beyond the noise.** A ratio more than 10% from even, with every round on
#   the same side; anything less is "either".
# - **On the cpu profile, timings between engines rank two CPU set-ups.** Run chapters 04 to 07 with your
#   GPU profile, then this chapter, for a guide that holds on your hardware.
# - **A verdict on an article is not a measurement.** Rows that rest on the ledger favour no engine.

# %% [markdown]
# ## Exercises
#
# 1. (5 min, no engine) Write the rule for one ratio: given a vLLM/SGLang ratio, whether lower is
#    better, and the tie, return "vLLM", "SGLang" or "either". The check tries this run's ratios at a
#    tie of 10% and of 5%, each ratio inverted (SGLang's value over vLLM's), and a ratio close to 1.
# 2. (5 min, no engine) Chapter 06 saved, for each speculative method and load, the lowest and highest
#    speedup over its rounds (a speedup is the decode rate with speculation over the rate without, so
#    above 1 is faster). Write the verdict the guide gives: "helps" where every round is above 1,
#    "hurts" where every round is below 1, otherwise (a round at exactly 1 included) "not resolved".
# 3. (10 min, no engine) Which head-to-head rows would favour an engine if this run were on a GPU
#    profile? Write `favoured` from one row's median, lowest and highest round (raw vLLM/SGLang
#    ratios, as in the table, not turned), applying both conditions. Then use it on the `ratios`
#    table (columns `situation`, `median`, `lowest round`, `highest round`, `lower is better`) to
#    say which rows favour an engine at a tie of 10%, and which change at 5%.
#
# Fill in each stub, then run its check; solutions are hidden below.

# %%
# Exercise 1: your answer
from servelab.book import exercise_check


def leaning(ratio: float, lower_is_better: bool, tie: float) -> str:
    """"vLLM", "SGLang" or "either" for a vLLM/SGLang `ratio`."""
    raise NotImplementedError


# %%
exercise_check.check(leaning, answers.lean_cases(ratios), title="Exercise 1")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 1
def leaning(ratio: float, lower_is_better: bool, tie: float) -> str:  # noqa: F811
    if abs(ratio - 1) <= tie:
        return "either"
    vllm_ahead = ratio < 1 if lower_is_better else ratio > 1
    return "vLLM" if vllm_ahead else "SGLang"


exercise_check.check(leaning, answers.lean_cases(ratios), title="Solution 1")

# %%
# Exercise 2: your answer


def speculation_verdict(lowest: float, highest: float) -> str:
    """"helps", "hurts" or "not resolved" from the lowest and highest round's speedup."""
    raise NotImplementedError


# %%
exercise_check.check(speculation_verdict, answers.speculation_cases(folder), title="Exercise 2")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 2
def speculation_verdict(lowest: float, highest: float) -> str:  # noqa: F811
    if lowest > 1:
        return "helps"
    if highest < 1:
        return "hurts"
    return "not resolved"


exercise_check.check(speculation_verdict, answers.speculation_cases(folder), title="Solution 2")

# %%
# Exercise 3: your answer


def favoured(median: float, lowest: float, highest: float, lower_is_better: bool, tie: float) -> str:
    """"vLLM", "SGLang" or "either" for one head-to-head row's rounds, as a GPU profile would read them."""
    raise NotImplementedError


# %%
exercise_check.check(favoured, answers.favoured_cases(ratios), title="Exercise 3")

# %% tags=["hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution 3
def favoured(median: float, lowest: float, highest: float, lower_is_better: bool, tie: float) -> str:  # noqa: F811
    if abs(median - 1) <= tie:
        return "either"  # the median round is within the tie
    if (highest < 1) if lower_is_better else (lowest > 1):
        return "vLLM"  # every round: vLLM's time below SGLang's, or its throughput above
    if (lowest > 1) if lower_is_better else (highest < 1):
        return "SGLang"
    return "either"  # the rounds disagree


exercise_check.check(favoured, answers.favoured_cases(ratios), title="Solution 3")
at = {tie: [favoured(r["median"], r["lowest round"], r["highest round"], r["lower is better"], tie)
            for _, r in ratios.iterrows()] for tie in (0.10, 0.05)}
for situation, answer in zip(ratios.situation, at[0.10], strict=True):
    print(f"{situation}: {answer}")
changed = [s for s, a, b in zip(ratios.situation, at[0.10], at[0.05], strict=True) if a != b]
print(f"Answer: at a 10% tie {sum(a != 'either' for a in at[0.10])} of {len(ratios)} rows would favour an engine "
      f"if these were a GPU profile's ratios (listed above); with 5%, {len(changed)} change: {changed or 'none'}.")
