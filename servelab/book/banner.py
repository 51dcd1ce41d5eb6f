"""The banner at the top of every notebook: which profile, hardware and versions produced it."""

from __future__ import annotations

from servelab.book import plots
from servelab.book.i18n import t
from servelab.book.provenance import provenance
from servelab.machine import profiles
from servelab.machine.profiles import Profile


def banner(profile: Profile) -> str:
    p = provenance(profile)
    rows = [
        (t("profile"), f"{p['profile']} — {profile.summary}"),
        (t("hardware"), f"{p['cpu']} · {p['cpu_cores']} cores · {p['memory_gib']} GiB · GPU: {p['gpus']}"),
        (t("engines"), f"vLLM {p['vllm']} (torch {p['vllm torch']}) · "
                       f"SGLang {p['sglang']} (torch {p['sglang torch']})"),
        (t("model"), f"{p['model']} ({p['dtype']})"),
        (t("run"), f"{p['time_utc']} · servelab {p['servelab']} · commit {p['commit']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}} : {v}" for k, v in rows)


def show(profile: Profile) -> None:
    print(banner(profile))


def start(profile: str = "auto") -> Profile:
    """A chapter's first cell after its parameters: load the profile, print the banner, set the plot style."""
    prof = profiles.load(profile)
    show(prof)
    plots.style()
    return prof
