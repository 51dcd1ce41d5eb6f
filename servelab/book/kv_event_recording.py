"""A chapter's recording of the engines' KV-cache events: saved with provenance, then drawn, and the referee's
tables printed for the evidence layer. Chapters 03 and 04 each show one recording this way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.book import kv_event_figure, results
from servelab.machine.profiles import Profile
from servelab.measure.kv_events import Replay, Trace, frames


def save_and_draw(name: str, recordings: Mapping[str, tuple[Trace, Replay]], profile: Profile, title: str,
                  **notes: Any) -> kv_event_figure.Scrubber:
    """Save each engine's trace (the events of its recording window) as `<name>_<engine>` and its referee's table
    as `<name>_referee_<engine>`, then return the figure of both replays (`recordings`: engine -> (trace, replay))."""
    for engine, (trace, referee) in recordings.items():
        results.save(f"{name}_{engine}", trace.window_only().to_dict(), profile, **notes)
        results.save(f"{name}_referee_{engine}", referee.table, profile, unit=referee.unit, **notes)
    trace = next(iter(recordings.values()))[0]  # the same requests on every engine
    sequences = [[*mark["tokens"], *mark.get("output", [])] for mark in trace.requests]
    return kv_event_figure.scrubber(frames(**{engine: referee for engine, (_, referee) in recordings.items()},
                                           sequences=sequences), title=title)


def print_referees(*referees: Replay) -> None:
    """Each referee's table, request by request, and what it cannot compare."""
    for referee in referees:
        print(f"{referee.engine}, in {referee.unit}s of {referee.unit_tokens} token(s):")
        print(referee.table.to_string(index=False))
        print("problems:", *(referee.problems or ["none"]), sep="\n  ")
        print("not compared:", *referee.differences, sep="\n  ")
