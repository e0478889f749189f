"""Payload logging: a sampled copy of model requests and their answers, for drift checks and replay.

The front door (service/telemetry/observe.py) hands over the raw bytes (HTTP) or messages (gRPC) it
already holds; a bounded queue carries them to one writer thread per serving process, which
decodes, redacts and writes them. A full queue drops the record and counts it
(``inferpool_payload_log_records_total{outcome="dropped"}``): a slow or stalled sink never
holds up an answer. Headers are never copied, so neither is the API key; binary tensor data
is recorded by its size only.

Sinks, by the ``payload_log`` setting: ``-`` = stdout, an ``http(s)://`` URL = CloudEvents
(binary mode, a request event and a response event sharing one id, as KServe's logger sends),
anything else = a JSON-lines file (appended, one ``write`` per line, so processes sharing it
never interleave within a line).
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from google.protobuf.json_format import MessageToDict
from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)
REDACTED = "[redacted]"
HTTP_TIMEOUT_SECONDS = 5.0
STOP_SECONDS = 2.0
CLOUDEVENT_TYPE = "org.inferpool.inference."  # + "request" / "response"
PAYLOAD_KEYS = frozenset(
    f"{side}{part}" for side in ("request", "response") for part in ("", "_message", "_json_length", "_encoding")
)
Record = dict[str, Any]
"""What the door hands over: metadata, and the payloads still raw (``request``/``response`` bytes
with ``request_json_length``/``response_json_length`` for v2 binary bodies, or ``request_message``/
``response_message`` protobufs)."""


def redact(document: Any, names: frozenset[str]) -> Any:
    """``document`` with the named tensors' values replaced: /predict's ``{"inputs": {name: x}}``
    and v2's ``{"inputs": [{"name": ..., "data"|"contents": ...}]}``, outputs alike."""
    if not names or not isinstance(document, dict):
        return document
    for key in ("inputs", "outputs"):
        tensors = document.get(key)
        if isinstance(tensors, dict):
            for name in tensors.keys() & names:
                tensors[name] = REDACTED
        elif isinstance(tensors, list):
            for tensor in tensors:
                if isinstance(tensor, dict) and tensor.get("name") in names:
                    for value in ("data", "contents"):
                        if value in tensor:
                            tensor[value] = REDACTED
    return document


def http_payload(
    body: bytes, json_length: int | None, encoding: str | None, names: frozenset[str], parsed: bool = False
) -> Any:
    """An HTTP body as JSON (v2's binary part by its size). ``parsed``: the server already
    read it as JSON (an answered request, or its answer), so with nothing to redact or cut
    out it is copied as it is, not decoded and encoded again (a third of the writer's time)."""
    if parsed and not names and json_length is None and encoding is None:
        return orjson.Fragment(body)
    if encoding in ("gzip", "deflate"):
        try:
            body = zlib.decompress(body, 47)  # 47: gzip or zlib, by the header
        except zlib.error:
            return {"undecoded_bytes": len(body)}
    head, tail = (body, b"") if json_length is None else (body[:json_length], body[json_length:])
    try:
        document = orjson.loads(head)
    except orjson.JSONDecodeError:
        return {"undecoded_bytes": len(body)}
    if tail and isinstance(document, dict):
        document["binary_bytes"] = len(tail)
    return redact(document, names)


def grpc_payload(message: Any, names: frozenset[str]) -> Any:
    document = MessageToDict(message)
    for raw in ("rawInputContents", "rawOutputContents"):
        if raw in document:
            document[raw] = [{"binary_bytes": len(part)} for part in getattr(message, _snake(raw))]
    return redact(document, names)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def render(record: Record, names: frozenset[str]) -> Record:
    """The record as written: metadata, then ``request`` and ``response`` as JSON."""
    out = {k: v for k, v in record.items() if k not in PAYLOAD_KEYS}
    out["time"] = datetime.fromtimestamp(record["time"], UTC).isoformat(timespec="milliseconds")
    for side in ("request", "response"):
        if f"{side}_message" in record:
            out[side] = grpc_payload(record[f"{side}_message"], names)
        else:
            body = record.get(side, b"")
            length, encoding = record.get(f"{side}_json_length"), record.get(f"{side}_encoding")
            out[side] = http_payload(body, length, encoding, names, record.get("status") == 200)
    return out


def _lines(path: str) -> Callable[[Record], None]:
    fd = 1 if path == "-" else os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(record: Record) -> None:
        os.write(fd, orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    return write


def _cloudevents(url: str) -> Callable[[Record], None]:
    source = f"inferpool/{os.uname().nodename}/{os.getpid()}"

    def send(record: Record) -> None:
        for side in ("request", "response"):
            headers = {
                "content-type": "application/json",
                "ce-specversion": "1.0",
                "ce-id": str(record.get("request_id") or ""),
                "ce-source": source,
                "ce-type": CLOUDEVENT_TYPE + side,
                "ce-time": str(record["time"]),
                "ce-inferpoolmodel": str(record.get("model") or ""),
            }
            data = orjson.dumps(record[side])
            request = urllib.request.Request(url, data, headers, method="POST")
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as answer:
                answer.read()

    return send


def sink_kind(value: str) -> str:
    return "stdout" if value == "-" else "http" if value.startswith(("http://", "https://")) else "file"


SINKS: dict[str, Callable[[str], Callable[[Record], None]]] = {
    "stdout": _lines,
    "file": _lines,
    "http": _cloudevents,
}


class PayloadLog:
    """The queue and its writer thread: ``start`` in the serving process (after the fork)."""

    def __init__(self, sink: str, capacity: int, names: frozenset[str], registry: CollectorRegistry) -> None:
        self.sink, self.names = sink, names
        self._queue: queue.Queue[Record | None] = queue.Queue(capacity)
        doc = "Payload log records, by outcome: written, dropped (the queue was full), failed (the sink refused)."
        counter = Counter("inferpool_payload_log_records", doc, ("outcome",), registry=registry)
        self.written, self.dropped, self.failed = (counter.labels(o) for o in ("written", "dropped", "failed"))
        self._thread: threading.Thread | None = None
        self._warned = 0.0

    def start(self) -> None:
        write = SINKS[sink_kind(self.sink)](self.sink)
        self._thread = threading.Thread(target=self._run, args=(write,), name="payload-log", daemon=True)
        self._thread.start()

    def offer(self, record: Record) -> None:
        """Queued, or dropped at once when the queue is full: never waits."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped.inc()

    def stop(self) -> None:
        if self._thread is None:
            return
        try:  # what is queued is written first, as long as the sink keeps up
            self._queue.put(None, timeout=STOP_SECONDS)
        except queue.Full:
            return  # a stalled sink: its thread is a daemon and ends with the process
        self._thread.join(STOP_SECONDS)
        self._thread = None

    def _run(self, write: Callable[[Record], None]) -> None:
        while (record := self._queue.get()) is not None:
            try:
                write(render(record, self.names))
                self.written.inc()
            except Exception as exc:  # noqa: BLE001 -- a sink's failure must not end the thread
                self.failed.inc()
                if time.monotonic() - self._warned > 60:  # once a minute, not once a request
                    self._warned = time.monotonic()
                    log.warning("payload log sink %s failed: %s", self.sink, exc)
        sys.stdout.flush()
