"""Engines' Prometheus /metrics, parsed with prometheus_client's own text parser.

Counter samples keep their `_total` suffix in the exposition; `Metrics.value` accepts a name with
or without it, so notebooks can use the names the engines document (vllm:prefix_cache_hits).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Metrics:
    """One scrape: samples by name, with label filtering."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self.samples: dict[str, list[Sample]] = {}
        for s in samples:
            self.samples.setdefault(s.name, []).append(s)

    @classmethod
    def parse(cls, text: str) -> Metrics:
        return cls(Sample(s.name, dict(s.labels), s.value)
                   for family in text_string_to_metric_families(text) for s in family.samples)

    def _find(self, name: str) -> list[Sample]:
        for candidate in (name, f"{name}_total"):
            if candidate in self.samples:
                return self.samples[candidate]
        raise KeyError(f"no metric {name!r}; this engine exposes {len(self.samples)} series, "
                       f"e.g. {', '.join(sorted(self.samples)[:5])}")

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels`."""
        return sum(s.value for s in self._find(name) if labels.items() <= s.labels.items())

    def labels(self, name: str) -> dict[str, str]:
        """Labels of the first sample of an info-style metric (e.g. vllm:cache_config_info)."""
        return self._find(name)[0].labels

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self.samples if n.startswith(prefix))


def scrape(base_url: str, timeout: float = 10.0) -> Metrics:
    response = httpx.get(f"{base_url}/metrics", timeout=timeout)
    response.raise_for_status()
    return Metrics.parse(response.text)


def delta(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    """How much a counter grew between two scrapes."""
    return after.value(name, **labels) - before.value(name, **labels)


class Sampler:
    """Scrape /metrics every `every_s` seconds in a background thread while a block runs.

        with Sampler(server.url, ["vllm:kv_cache_usage_perc"]) as sampler:
            run_load(...)
        sampler.frame()  # one row per scrape: t_s and one column per metric
    """

    def __init__(self, base_url: str, names: list[str], every_s: float = 0.25) -> None:
        self.base_url, self.names, self.every_s = base_url, names, every_s
        self.rows: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self, t0: float) -> None:
        metrics = scrape(self.base_url)
        self.rows.append({"t_s": time.perf_counter() - t0, **{n: metrics.value(n) for n in self.names}})

    def _loop(self) -> None:
        t0 = time.perf_counter()
        try:
            self._sample(t0)
            while not self._stop.wait(self.every_s):
                self._sample(t0)
            self._sample(t0)  # one last scrape after the block ended, so counters are final
        except BaseException as err:  # noqa: BLE001 - handed to the caller in __exit__
            self._error = err

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise RuntimeError(f"sampling {self.base_url}/metrics failed: {self._error!r}") from self._error

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)
