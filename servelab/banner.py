"""The banner at the top of every notebook: which profile, hardware and versions produced it."""

from __future__ import annotations

from servelab.i18n import t
from servelab.profiles import Profile
from servelab.versions import provenance


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
