"""Recorder: subscribe to an engine's KV cache events over ZMQ and write them as JSON lines.

Runs inside the engine's venv and decodes every message with the engine's own schema classes: vLLM's
``KVEventBatch`` (``vllm/distributed/kv_events.py``) or SGLang's (``sglang/srt/disaggregation/kv_events.py``).
Both engines' ``ZmqEventPublisher`` send multipart messages (topic, 8-byte big-endian sequence number,
msgpack batch ``[ts, events, rank]``); a publisher whose endpoint names a concrete host *connects* its PUB
socket, so this recorder binds the SUB side on 127.0.0.1 and the engine binds nothing for its events.

    python kv_event_recorder.py ENGINE OUT [--port N] [--topic T] [--parent PID]

``--port 0`` (the default) lets the system pick a free port. Once bound it prints one JSON line,
``{"ready": true, "endpoint": "tcp://127.0.0.1:PORT"}``; then each message becomes one line of OUT,
``{"seq", "ts" (the engine's batch time), "recv" (time.time() here), "events": [...]}``, each event a dict
with its ``type`` (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``) and its fields, hashes as strings
(hex for bytes, decimal for integers). SIGTERM or SIGINT ends it: OUT is flushed and the last stdout line is
``{"messages": n, "out": OUT}``. With ``--parent`` it also stops once that process is gone (a killed notebook
kernel leaves no recorder behind). Imports nothing from servelab.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import signal
import sys
import time


def schema(engine: str):
    """The engine's own batch class."""
    if engine == "vllm":
        from vllm.distributed.kv_events import KVEventBatch
    elif engine == "sglang":
        from sglang.srt.disaggregation.kv_events import KVEventBatch
    else:
        raise SystemExit(f"unknown engine {engine!r}; accepted: vllm, sglang")
    return KVEventBatch


def hash_text(value) -> str | None:
    """A block hash as a string: hex for bytes (vLLM's SHA-256), decimal for integers (SGLang's int64)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return str(value)


def plain(value):
    """A decoded field as JSON: enums by value, tuples as lists, bytes as hex."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def event_dict(event) -> dict:
    """One decoded event (a msgspec Struct) as a dict: its class name under ``type``, then its fields."""
    out = {"type": type(event).__name__}
    for name in event.__struct_fields__:
        value = getattr(event, name)
        if name == "block_hashes":
            out[name] = [hash_text(h) for h in value]
        elif name == "parent_block_hash":
            out[name] = hash_text(value)
        else:
            out[name] = plain(value)
    return out


def decode(decoder, frames: list[bytes], recv: float) -> dict:
    """One multipart message (topic, sequence number, payload) as the line this recorder writes."""
    if len(frames) != 3:
        raise ValueError(f"expected 3 frames (topic, seq, payload), got {len(frames)}")
    _, seq, payload = frames
    batch = decoder.decode(payload)
    return {"seq": int.from_bytes(seq, "big", signed=True), "ts": batch.ts, "recv": recv,
            "events": [event_dict(e) for e in batch.events]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("engine", choices=("vllm", "sglang"))
    parser.add_argument("out")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--topic", default="")
    parser.add_argument("--parent", type=int, default=0)
    args = parser.parse_args()

    import msgspec
    import zmq

    decoder = msgspec.msgpack.Decoder(type=schema(args.engine))
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)  # never drop on our side
    sub.setsockopt(zmq.SUBSCRIBE, args.topic.encode())
    if args.port:
        sub.bind(f"tcp://127.0.0.1:{args.port}")
        port = args.port
    else:
        port = sub.bind_to_random_port("tcp://127.0.0.1")
    print(json.dumps({"ready": True, "endpoint": f"tcp://127.0.0.1:{port}"}), flush=True)

    messages = 0
    with open(args.out, "w") as out:
        while not stop and not (args.parent and os.getppid() != args.parent):
            if not sub.poll(100):
                continue
            while True:  # drain what has arrived, then look at the stop flag again
                try:
                    frames = sub.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                out.write(json.dumps(decode(decoder, frames, time.time())) + "\n")
                out.flush()
                messages += 1
    sub.close(linger=0)
    ctx.term()
    print(json.dumps({"messages": messages, "out": args.out}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
