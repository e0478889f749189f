"""Logging: plain or JSON lines, each carrying the id of the request it belongs to and, once the
request has found its model, the model's name and version (``model_served``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

from inferpool.engine.client import request_id

model_served: ContextVar[tuple[str, str] | None] = ContextVar("model_served", default=None)
"""(name, version label) of the model the current request was routed to: set where every front
end resolves its model (ModelHost.get), read by log lines and the phase metrics. The version
label is a repository model's version and "" for the config's models, whose lines and series
stay as they were before versions existed. Each request runs in its own task, hence its own
context: the value never leaks into the next request on a connection. Not set on the engine's
worker threads, whose lines carry the request id (and name the model in their message)."""


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        name, version = model_served.get() or ("", "")
        record.model, record.model_version = name, version
        # The plain format's suffix after the request id: " scale:2", " digits", or nothing.
        record.served = f" {name}:{version}" if version else f" {name}" if name else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers; tracebacks stay inside the object."""

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, "access", None)  # an access-log line (service/telemetry/observe.py)
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage() if access is None else "access",  # its fields, not their text
            "request_id": getattr(record, "request_id", "-"),
        }
        model, version = getattr(record, "model", ""), getattr(record, "model_version", "")
        if model:
            entry["model"] = model
        if version:
            entry["version"] = version
        if access is not None:
            entry.update((key, value) for key, value in access.items() if key not in entry and value is not None)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


FORMATTERS: dict[str, Callable[[], logging.Formatter]] = {
    "plain": lambda: logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s%(served)s] %(message)s"),
    "json": JsonFormatter,
}


def configure_logging(level: str, style: str) -> None:
    """Route every logger (uvicorn's too) through one handler with the chosen format."""
    handler = logging.StreamHandler()
    handler.setFormatter(FORMATTERS[style]())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
