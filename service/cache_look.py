"""The front door's look at its response cache (``CacheLook``): for a request the door lets
through (the cache holds its model's answers, no ``Cache-Control: no-cache``, its model's
``LookSampler`` did not skip it), its key and the answer held for it, and then its answer kept.

A cheap model's request (a deadline floor under ``DOORKEEPER_UNDER_MS``) is kept only from its
second sighting (the ``Doorkeeper``, service/response_cache.py): its first costs a hash of its
inputs and a mark, no key. A dearer model's is kept at once. The key is four bytes for the
model's record and the route's encoder (``key_prefix``), then the request written out
(service/request_digest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferpool.service.request_digest import request_digest, sighting
from inferpool.service.response_cache import Key, ResponseCache

if TYPE_CHECKING:
    from inferpool.service.frontdoor import Served
    from inferpool.service.telemetry.traffic import CacheTallies

DOORKEEPER_UNDER_MS = 2
"""Models whose deadline floor (their fastest call, with the request's path) is under this keep
a request's answer only from its second sighting (``Doorkeeper``): on a call of ~20 µs, building a
key and an entry for every one-off request was a tenth of the rate. A dearer model keeps it at
once, where those few µs are noise and a repeat that misses again costs a whole call (on the
MiniLM Zipf workload, behind the doorkeeper: 20.4k req/s at a 98.7 % hit ratio; kept at once:
23.9k at 99.5 %)."""
Found = tuple[Key | None, Any]
"""A request's key (None: none built) and the answer held for it (None: a miss)."""
_NOTHING: Found = (None, None)


class CacheLook:
    """One front door's response cache, and the keys' prefixes it gives its (model, route) pairs."""

    __slots__ = ("_key_prefixes", "cache")

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._key_prefixes: dict[tuple[Served, Callable[..., Any]], bytes] = {}

    @classmethod
    def of_megabytes(cls, megabytes: float) -> CacheLook | None:
        """The look at the cache ``response_cache_mb`` asks for; None when it is 0 (off)."""
        cache = ResponseCache.of_megabytes(megabytes)
        return None if cache is None else cls(cache)

    def look(
        self, served: Served, tallies: CacheTallies, inputs: object, encode: Callable[..., Any], decoded: object
    ) -> Found:
        """The request's key and the answer held for it; counted on ``tallies`` (a hit or a miss)
        and on its model's sampler."""
        cheap = served.model.deadline_floor_ms < DOORKEEPER_UNDER_MS
        seen = sighting(inputs)
        if seen is None:
            return _NOTHING
        if cheap and self.cache.doorkeeper.first_sighting(seen):  # not kept: no key to build, nothing to look up
            served.sampler.missed()
            tallies.miss.add()
            return _NOTHING
        digest = request_digest(inputs, decoded)
        if digest is None:
            return _NOTHING
        key = self.key_prefix(served, encode) + digest
        found = self.cache.get(key)
        if found is None:
            if cheap:  # a dearer model is looked at every time (its sampler never samples)
                served.sampler.missed()
            tallies.miss.add()
            return key, None
        served.sampler.hit()
        tallies.hit.add()
        return key, found

    def key_prefix(self, served: Served, encode: Callable[..., Any]) -> bytes:
        """The four bytes that stand for ``served`` and ``encode`` in a response cache key."""
        pair = (served, encode)
        found = self._key_prefixes.get(pair)
        if found is None:
            found = self._key_prefixes[pair] = len(self._key_prefixes).to_bytes(4, "little")
        return found

    def keep(self, key: Key, body: object) -> None:
        """A miss's answer, held for the next request of ``key``."""
        self.cache.put(key, body)
