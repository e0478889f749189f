"""Logging: plain or JSON lines, each carrying the id of the request it belongs to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from engine.requests import request_id


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers; tracebacks stay inside the object."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


FORMATTERS: dict[str, Callable[[], logging.Formatter]] = {
    "plain": lambda: logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"),
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
