"""Several runs of vLLM's own load generator (`vllm bench serve`) in one process.

Runs inside the vLLM venv and imports nothing from servelab. Each run is the argument list of
`vllm bench serve` (parsed by vLLM's own `add_cli_args` parser, then `vllm.benchmarks.serve.main`,
the function the `vllm bench serve` command calls), so importing vLLM is paid once for all runs.
The server may be any OpenAI-compatible one (vLLM or SGLang): the client only speaks HTTP.

stdin: {"runs": [{"name": "...", "args": ["--backend", "openai", ...], "chats": [...], "tokenizer": "..."},
                 ...], "parse_only": false, "metrics_url": "http://.../metrics", "counter": "vllm:prefix_cache_hits"}
stdout (last line): {"version": "...", "runs": [{"name": ..., "args": [...], "result": {...}, "requests": {...},
                     "counter": {"before": x, "after": y}}, ...]}
where `result` is the dictionary `main` returns (what --save-result writes) without its per-request lists,
`requests` holds those lists (PER_REQUEST), and `counter` the server's `counter` (summed over its series,
from `metrics_url`) read before and after the run, when a metrics_url is given.

A run with `chats` (lists of OpenAI messages) has them rendered with `tokenizer`'s chat template into
a JSONL file of {"prompt": text} lines, in order, at the run's `--dataset-path` (a `custom` dataset,
sent as text with `--skip-chat-template`). vLLM's `CustomDataset.load_data` reads that file with
pandas, which the vLLM CPU venv does not install; here the same lines are read with `json` instead
(`JsonlCustomDataset`, the one change to the client; sampling and sending are vLLM's). With
`parse_only` nothing is sent: each run's arguments are parsed and its namespace's non-default values
returned (what a test checks against vLLM's parser).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import urllib.request

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times", "latencies",
               "queue_times")
KEPT_PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times")
SETTLE_S = 0.5  # before reading a counter after a run: the server's last step's stats reach /metrics


def read_counter(url: str, name: str) -> float:
    """The sum of every sample of counter `name` (Prometheus text at `url`; `name` with or without _total).
    A counter with labels has no sample until it is first incremented (SGLang's cached-token counter only
    counts requests that hit): it reads 0 while its family is declared, or, if the engine declares
    counters lazily, while it is absent."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    base = name.removesuffix("_total")
    return float(sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
                     if s.name in (base, f"{base}_total")))


def main(request: dict) -> dict:
    from unittest import mock

    import vllm
    from vllm.benchmarks import serve
    from vllm.benchmarks.datasets import datasets
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class JsonlCustomDataset(datasets.CustomDataset):
        """vLLM's custom dataset with its JSONL file read by json rather than pandas."""

        def load_data(self) -> None:
            if self.dataset_path is None or not self.dataset_path.endswith(".jsonl"):
                raise ValueError(f"a custom dataset here is a .jsonl file, got {self.dataset_path!r}")
            with open(self.dataset_path) as f:
                self.data = [json.loads(line) for line in f if line.strip()]
            if any("prompt" not in row for row in self.data):
                raise ValueError("JSONL file must contain a 'prompt' column.")
            datasets.random.seed(self.random_seed)
            if not getattr(self, "disable_shuffle", False):
                datasets.random.shuffle(self.data)

    out = []
    for run in request["runs"]:
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        serve.add_cli_args(parser)
        args = parser.parse_args(run["args"])
        if request.get("parse_only"):
            defaults = vars(parser.parse_args([]))
            out.append({"name": run["name"], "args": run["args"],
                        "parsed": {k: v for k, v in vars(args).items() if defaults.get(k) != v}})
            continue
        if run.get("chats"):
            write_chats(run["chats"], run["tokenizer"], args.dataset_path)
        url, counter = request.get("metrics_url"), request.get("counter")
        before = read_counter(url, counter) if url else None
        with contextlib.redirect_stdout(io.StringIO()) as printed, \
                mock.patch.object(datasets, "CustomDataset", JsonlCustomDataset):  # stdout kept for the JSON answer
            result = serve.main(args)
        sys.stderr.write(printed.getvalue())
        entry = {"name": run["name"], "args": run["args"],
                 "result": {k: v for k, v in result.items() if k not in PER_REQUEST},
                 "requests": {k: result[k] for k in KEPT_PER_REQUEST if k in result}}
        if url:
            time.sleep(SETTLE_S)
            entry["counter"] = {"name": counter, "before": before, "after": read_counter(url, counter)}
        out.append(entry)
    return {"version": vllm.__version__, "runs": out}


def write_chats(chats: list[list[dict]], tokenizer_path: str, path: str) -> None:
    """The chats as prompts rendered by the tokenizer's own chat template, one JSONL line each, in order."""
    from vllm.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(tokenizer_path)
    with open(path, "w") as f:
        for messages in chats:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            f.write(json.dumps({"prompt": text}) + "\n")


if __name__ == "__main__":
    print(json.dumps(main(json.load(sys.stdin))))
