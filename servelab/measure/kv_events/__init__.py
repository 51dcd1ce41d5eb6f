"""Issue 23, the engines' KV cache events: recorded live, and refereed against our caches.

``record`` starts a subscriber in the engine's venv and marks requests client-side; ``workload`` holds the
requests and the one call a chapter makes per engine (``record_eviction``); ``engine_trace`` reads a trace,
``sims`` replays the same requests on ``servelab.sim.prefix_cache``, ``replay`` is the referee that compares
them request by request, and ``frames`` turns a replay into the steps of a figure. ``keys`` names a cached
unit by its content, so the engines' hashes and ours need not agree. Chapter 03's requests that decode: ``paging``
(the workload and ``record_paging``), ``decode_send``, ``decode_sims`` and ``paging_replay`` (``replay_paging``).
"""

from servelab.measure.kv_events.frames import frames
from servelab.measure.kv_events.paging import PagingWorkload, paging_workload, record_paging
from servelab.measure.kv_events.paging_replay import replay_paging
from servelab.measure.kv_events.record import Recorder, Trace, event_options, recording
from servelab.measure.kv_events.replay import Replay, replay
from servelab.measure.kv_events.workload import Workload, eviction_workload, record_eviction, record_workload, workload

__all__ = ["PagingWorkload", "Recorder", "Replay", "Trace", "Workload", "event_options", "eviction_workload", "frames",
           "paging_workload", "record_eviction", "record_paging", "record_workload", "recording", "replay",
           "replay_paging", "workload"]
