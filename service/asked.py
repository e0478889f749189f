"""What a caller asked of its call besides the inputs, read once from its headers (HTTP) or
metadata (gRPC) where its ``Call`` begins (service/calls.py), for the front door to act on:
``X-Request-Priority`` and ``Cache-Control: no-cache``.

A context variable, not an argument of ``FrontDoor.infer``: every route that hands its request
to the door gets both without code of its own. Set for every call (``NOTHING`` when neither
header came), since a lane's callbacks share one context between requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import NamedTuple

PRIORITY_HEADER = b"x-request-priority"
CACHE_CONTROL = b"cache-control"
_METADATA = {PRIORITY_HEADER.decode(): 0, CACHE_CONTROL.decode(): 1}


class Asked(NamedTuple):
    priority: bytes | str | None
    """The X-Request-Priority header as sent (parsed, and refused when bad, by the door)."""
    cache_control: bytes | str | None

    @property
    def no_cache(self) -> bool:
        """``Cache-Control: no-cache`` (or ``no-store``): answered by the model, not the cache."""
        given = self.cache_control
        if given is None:
            return False
        text = given.lower() if isinstance(given, str) else given.decode("latin-1").lower()
        return "no-cache" in text or "no-store" in text


NOTHING = Asked(None, None)
asked: ContextVar[Asked] = ContextVar("asked", default=NOTHING)


def asked_in(headers: Mapping[bytes, bytes]) -> Asked:
    """From an HTTP request's headers by lower-case name (two look-ups; no allocation when absent)."""
    priority, cache_control = headers.get(PRIORITY_HEADER), headers.get(CACHE_CONTROL)
    return NOTHING if priority is None and cache_control is None else Asked(priority, cache_control)


def asked_in_metadata(pairs: Iterable[tuple[str, str | bytes]]) -> Asked:
    """From a gRPC call's metadata (lower-case keys)."""
    found: list[str | bytes | None] = [None, None]
    for key, value in pairs:
        slot = _METADATA.get(key)
        if slot is not None:
            found[slot] = value
    return NOTHING if found == [None, None] else Asked(found[0], found[1])
