"""Chapter 08's selection guide: a decision table computed from the book's saved measurements and the ledger.

Each row is one situation a reader may be in, what this book measured about it (read from
results/<profile>/*.csv of chapters 04-07, or a ledger verdict), the leaning that follows, and where
the evidence is. A row whose results are not saved on this profile is left out, and a leaning is chosen
by comparing the measured numbers (within `tie`, TIE by default, of each other counts as no difference).
Two kinds of row do not lean: engine-against-engine timings measured on the cpu profile (`NOT_INDICATIVE`: there SGLang
runs on torch fallbacks, without its CPU kernels, against vLLM's compiled CPU kernels), and rows that
rest on a ledger verdict only (`EDITORIAL`). A saved table without a column a row needs raises
`MissingColumn`, naming the file, the column and what it has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from servelab.book import claims, results
from servelab.book.i18n import N_
from servelab.machine.paths import results_dir
from servelab.machine.profiles import Profile
from servelab.measure.deploying import head_to_head as h2h
from servelab.measure.speculative import load as spec_load

TIE = 0.10  # ratios within 10% of 1 lean to neither engine, even where every round agrees
NOT_INDICATIVE = "none: not indicative on cpu (SGLang without its CPU kernels)"
EDITORIAL = "none: a ledger verdict, not a measurement"
NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def lean(ratio: float, lower_is_better: bool = True, tie: float = TIE) -> str:
    """Which engine a vLLM/SGLang ratio favours, or 'either' within `tie` of 1."""
    if not 0 <= tie < 1:
        raise ValueError(f"tie must be at least 0 and below 1, got {tie!r}")
    if abs(ratio - 1) <= tie:
        return f"either (within {tie:.0%})"
    vllm_wins = ratio < 1 if lower_is_better else ratio > 1
    return "vLLM" if vllm_wins else "SGLang"


class MissingColumn(KeyError):
    pass


def results_folder(profile: Profile) -> Path:
    """Where the chapters saved `profile`'s results (results/<profile>, or under SERVELAB_RESULTS)."""
    return results_dir() / profile.name


def saved_table(folder: Path, name: str, needs: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """results/<profile>/<name>.csv as a table (its read noted), None when not saved; `needs`: columns it must have."""
    path = results.note_read(folder / f"{name}.csv")
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    missing = [c for c in needs if c not in table.columns]
    if missing:
        raise MissingColumn(f"{path} has no column {', '.join(map(repr, missing))}; "
                            f"it has: {', '.join(map(str, table.columns))}")
    return table


def _percent(text: str) -> float:
    return float(str(text).split("%")[0]) / 100


def _timing(ratio: float, indicative: bool, lower_is_better: bool = True, tie: float = TIE) -> str:
    return lean(ratio, lower_is_better, tie) if indicative else NOT_INDICATIVE


def lean_over_rounds(stats: pd.Series, lower_is_better: bool = True, tie: float = TIE) -> str:
    """`lean` on the median round, but only where every round favoured that engine (`h2h.ratio_spread`'s
    row); rounds that disagree lean to neither."""
    leaning = lean(stats["median"], lower_is_better, tie)
    if leaning.startswith("either") or not stats["favoured in every round"]:
        return leaning if leaning.startswith("either") else "either (the rounds disagree)"
    return leaning


# the head-to-head rows: (situation, how the run is picked, the metric the row leans on)
TIMING_ROWS = ((N_("one request at a time, latency matters"), "fewest in flight", "p50_e2el_ms"),
               (N_("many concurrent requests, throughput matters"), "most in flight", "output_throughput"),
               (N_("prompts share a prefix (chat, agents, RAG)"), "shared_prefix", "p50_e2el_ms"),
               (N_("multi-turn chat re-sending the conversation"), "multi_turn", "p50_e2el_ms"),
               (N_("long prompts (a quarter of the context window)"), "long_prompt", "p50_e2el_ms"))
METRIC_NAMES = {"p50_e2el_ms": N_("median request latency"), "p50_ttft_ms": N_("median TTFT"),
                "output_throughput": N_("output tokens/s")}


def _head_to_head_table(folder: Path) -> pd.DataFrame | None:
    return saved_table(folder, "head_to_head", ("engine", "run", "workload", "concurrency", "p50_ttft_ms",
                                                "p50_e2el_ms", "output_throughput"))


TIMING_COLUMNS = ["situation", "run", "metric", "lower is better", "median", "lowest round", "highest round",
                  "favoured in every round", "rounds"]


def timing_ratios(folder: Path) -> pd.DataFrame:
    """The engine-against-engine ratios the guide's head-to-head rows lean on (chapter 07's saved runs): per
    row, its situation, run and metric, whether lower is better, the vLLM/SGLang ratio of the median round, the
    lowest and highest round, and the engine every round favoured ("" where they disagree). Empty when chapter
    07 has not saved its runs in `folder`."""
    table = _head_to_head_table(folder)
    return pd.DataFrame(columns=TIMING_COLUMNS) if table is None else _timing_rows(table)


def _timing_rows(table: pd.DataFrame) -> pd.DataFrame:
    """`timing_ratios` of chapter 07's saved table."""
    runs = table[table.engine == "vllm"].drop_duplicates("run")
    sweep = runs[runs.workload.eq("random")].dropna(subset=["concurrency"]).sort_values("concurrency")
    picked = {"fewest in flight": sweep.run.iloc[:1].tolist(), "most in flight": sweep.run.iloc[-1:].tolist()}
    spreads = {m: h2h.ratio_spread(table, m, lower_is_better=m != "output_throughput")
               for m in {metric for _, _, metric in TIMING_ROWS}}
    rows = []
    for situation, pick, metric in TIMING_ROWS:
        for run in picked.get(pick, runs[runs.workload == pick].run.iloc[:1].tolist()):
            r = spreads[metric].loc[run]
            rows.append({"situation": situation, "run": run, "metric": metric,
                         "lower is better": metric != "output_throughput", **{c: r[c] for c in TIMING_COLUMNS[4:]}})
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)


def advantage(ratios: pd.DataFrame, tie: float = TIE) -> pd.DataFrame:
    """`timing_ratios`' rows as vLLM's advantage: how many times better vLLM did than SGLang (SGLang's time over
    vLLM's, or vLLM's rate over SGLang's), above 1 where vLLM did better, for the median, lowest and highest round;
    and the band where `lean` favours neither engine (`tie` applies to the vLLM/SGLang ratio, so a time's band is
    1/(1 + tie) to 1/(1 - tie))."""
    rows = []
    for _, r in ratios.iterrows():
        flip = (lambda x: 1 / x) if r["lower is better"] else (lambda x: x)
        ends = sorted([flip(r["lowest round"]), flip(r["highest round"])])
        band = sorted([flip(1 - tie), flip(1 + tie)])
        rows.append({"situation": r.situation, "metric": r.metric, "median": flip(r["median"]), "lowest": ends[0],
                     "highest": ends[1], "band low": band[0], "band high": band[1]})
    return pd.DataFrame(rows, columns=["situation", "metric", "median", "lowest", "highest", "band low", "band high"])


def _head_to_head(folder: Path, indicative: bool, tie: float = TIE) -> list[dict]:
    table = _head_to_head_table(folder)
    if table is None:
        return []
    ttft = h2h.ratio_spread(table, "p50_ttft_ms")

    def said(r: pd.Series) -> str:
        return (f"{r['median']:.2f}" if r["rounds"] == 1
                else f"{r['median']:.2f} (rounds {r['lowest round']:.2f}-{r['highest round']:.2f})")

    hits = _prefix_hit_rates(folder)
    rows = []
    for _, row in _timing_rows(table).iterrows():
        measured = f"{row.run}: {METRIC_NAMES[row.metric]} vLLM/SGLang {said(row)}"
        if row.metric != "output_throughput":
            context = said(ttft.loc[row.run])  # the one-request row gives it in brackets, the others after a comma
            first = row.situation == TIMING_ROWS[0][0]
            measured += f" (median TTFT {context})" if first else f", median TTFT {context}"
        evidence = "chapter 07 'Head-to-head' (results head_to_head.csv)"
        if row.situation in (TIMING_ROWS[0][0], TIMING_ROWS[1][0]):
            evidence += "; ledger throughput-vs-latency-split, guide003-chat-sglang-api-vllm"
        if row.situation == TIMING_ROWS[2][0] and hits:
            measured += f"; context, chapter 04's multi-turn hit rate: {hits}"
            evidence += "; chapter 04 (results prefix_verdict.csv); ledger guide-vllm-for-rag"
        leaning = lean_over_rounds(row, row["lower is better"], tie) if indicative else NOT_INDICATIVE
        rows.append({"situation": row.situation, "measured": measured, "leaning": leaning, "evidence": evidence})
    return rows


def _measure(verdict: pd.DataFrame, name: str) -> pd.Series | None:
    """The row of chapter 04's verdict table called `name`, hyphens and spaces alike ("multi-turn" or
    "multi turn"); None when it has none."""
    def key(text: str) -> str:
        return " ".join(str(text).replace("-", " ").split())

    rows = verdict[verdict.measure.map(key) == key(name)]
    return None if rows.empty else rows.iloc[0]


def _prefix_hit_rates(folder: Path) -> str:
    verdict = saved_table(folder, "prefix_verdict", ("measure", "vLLM", "SGLang"))
    v = None if verdict is None else _measure(verdict, "multi-turn: hit rate")
    if v is None:
        return ""
    return f"vLLM {v['vLLM']}, SGLang {v['SGLang']} (each counted in whole blocks of its own size)"


def _prefix(folder: Path, tie: float = TIE) -> list[dict]:
    verdict = saved_table(folder, "prefix_verdict", ("measure", "vLLM", "SGLang"))
    measure = "loop that overflows the cache: second-round hit rate"
    v = None if verdict is None else _measure(verdict, measure)
    if v is None:
        return []
    hv, hs = _percent(v["vLLM"]), _percent(v["SGLang"])
    return [{"situation": "the reused prompts do not fit the KV cache",
             "measured": f"{measure}: vLLM {hv:.0%}, SGLang {hs:.0%}",
             "leaning": lean(hv / hs, lower_is_better=False, tie=tie) if hs else ("vLLM" if hv else "either (both 0%)"),
             "evidence": "chapter 04 (results prefix_verdict.csv)"}]


def _chunked(folder: Path, indicative: bool, tie: float = TIE) -> list[dict]:
    live = saved_table(folder, "chunked_prefill_live", ("config", "engine", "budget", "mixed_chunk", "threshold",
                                                 "long_ttft_s", "longest_stall_s"))
    if live is None:
        return []
    sgl = live[live.engine == "sglang"]
    plain, mixed = sgl[~sgl.mixed_chunk.astype(bool)], sgl[sgl.mixed_chunk.astype(bool)]
    vllm = live[(live.engine == "vllm") & (live.threshold == 0)]
    if plain.empty or mixed.empty or vllm.empty:
        return []
    small = plain.budget.min()
    p, m = plain[plain.budget == small].iloc[0], mixed[mixed.budget == small].iloc[0]
    v = vllm[vllm.budget == vllm.budget.min()].iloc[0]

    def both(r: pd.Series) -> str:
        return f"longest stall {r.longest_stall_s:.2f} s, long prompt's TTFT {r.long_ttft_s:.2f} s"

    best = p if p.longest_stall_s <= m.longest_stall_s else m
    leaning = _timing(v.longest_stall_s / best.longest_stall_s, indicative, tie=tie)
    rounds = saved_table(folder, "chunked_prefill_rounds", ("config", "round", "longest_stall_s"))
    if rounds is not None and indicative and not leaning.startswith("either"):
        # the two engines ran in different rounds (one engine's servers at a time): lean only where their
        # rounds' ranges do not overlap
        stalls = {c: rounds[rounds.config == c].longest_stall_s for c in (v.config, best.config)}
        apart = (stalls[v.config].max() < stalls[best.config].min()
                 or stalls[best.config].max() < stalls[v.config].min())
        leaning = leaning if apart else "either (the rounds overlap)"
    return [{"situation": "long prompts arrive while other users stream",
             "measured": (f"smallest budgets: vLLM {both(v)}; SGLang {both(p)} by default, "
                          f"{both(m)} with --enable-mixed-chunk" + (" (median rounds)" if rounds is not None else "")),
             "leaning": leaning,
             "evidence": "chapter 05 (results chunked_prefill_live.csv, chunked_prefill_rounds.csv)"}]


SPEEDUP_COLUMN = re.compile(r"^speedup, (.*?(\d+) requests?)$")
# chapter 06 states each speedup with the lowest and highest of its rounds; a speedup whose rounds
# straddle 1 keeps chapter 06's words, which name the number of rounds (spec_load.not_resolved)
SPEEDUP_WORDS = {"faster": "helps", "slower": "hurts"}


def _rounds(folder: Path, name: str) -> int:
    """The number of rounds chapter 06 saved beside its table (its meta.json's "rounds")."""
    path = results.note_read(folder / f"{name}.meta.json")
    rounds = json.loads(path.read_text()).get("rounds") if path.is_file() else None
    if rounds is None:
        raise MissingColumn(f"{path} does not say how many rounds {name}.csv has (its 'rounds'): a verdict "
                            "across the rounds needs it")
    return int(rounds)


def _speculative(folder: Path) -> list[dict]:
    summary = saved_table(folder, "speculative_summary", ("method",))
    if summary is None:
        return []
    by_load = {int(m.group(2)): m.group(1) for c in summary.columns if (m := SPEEDUP_COLUMN.match(str(c)))}
    if len(by_load) < 2:
        raise MissingColumn(f"{folder / 'speculative_summary.csv'} has no pair of 'speedup, ... N request(s)' "
                            f"columns at two loads; it has: {', '.join(map(str, summary.columns))}")
    lo, hi = by_load[min(by_load)], by_load[max(by_load)]
    needed = [f"{what}, {at}" for at in (lo, hi) for what in ("speedup", "lowest round", "highest round")]
    absent = [c for c in needed if c not in summary.columns]
    if absent:
        raise MissingColumn(f"{folder / 'speculative_summary.csv'} lacks {', '.join(map(repr, absent))}: each "
                            "speedup needs the lowest and highest of its rounds")
    rows = summary.dropna(subset=needed)
    if rows.empty:
        raise MissingColumn(f"{folder / 'speculative_summary.csv'}: no method has all of {needed}")
    best = rows.loc[rows[f"speedup, {lo}"].idxmax()]
    rounds = _rounds(folder, "speculative_summary")
    engine = NAMES["vllm"]  # chapter 06 sweeps its methods on vLLM (its GPU runs are a separate table)

    def stated(at: str) -> str:
        return (f"{best[f'speedup, {at}']:.2f} (rounds {best[f'lowest round, {at}']:.2f}"
                f"-{best[f'highest round, {at}']:.2f})")

    def verdict(at: str) -> str:
        said = spec_load.spread_verdict(best[f"lowest round, {at}"], best[f"highest round, {at}"], rounds)
        return SPEEDUP_WORDS.get(said, said)

    return [{"situation": "speculative decoding to cut latency",
             "measured": (f"{engine}, best method at {min(by_load)} request(s): {best.method}, speedup "
                          f"{stated(lo)}; at {max(by_load)} requests {stated(hi)}"),
             "leaning": (f"not an engine comparison: {verdict(lo)} at {min(by_load)} request(s), "
                         f"{verdict(hi)} at {max(by_load)}"),
             "evidence": "chapter 06 (results speculative_summary.csv)"}]


LEDGER_ROWS = (("guide-sglang-for-json", "structured (JSON) output"),
               ("guide003-vllm-under-memory-pressure", "little GPU memory"),
               ("sglang-no-multinode-docs", "the model needs more than one node"))


def _ledger(ledger: claims.Ledger) -> list[dict]:
    by_id = {c.id: c for c in ledger.claims}
    return [{"situation": situation, "measured": f"the articles' advice is {by_id[cid].verdict}: {by_id[cid].truth}",
             "leaning": EDITORIAL, "evidence": f"ledger {cid}"} for cid, situation in LEDGER_ROWS if cid in by_id]


def guide(folder: Path, profile: Profile, ledger: claims.Ledger | None = None, tie: float = TIE) -> pd.DataFrame:
    """The decision table from the results saved in `folder` (results/<profile>) and the ledger; a ratio within
    `tie` of 1 leans to neither engine. On a cpu `profile` engine-against-engine timings do not lean
    (NOT_INDICATIVE)."""
    indicative = not profile.is_cpu
    rows = [*_head_to_head(folder, indicative, tie), *_prefix(folder, tie), *_chunked(folder, indicative, tie),
            *_speculative(folder), *_ledger(ledger or claims.load())]
    return pd.DataFrame(rows, columns=["situation", "measured", "leaning", "evidence"])
