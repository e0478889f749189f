"""Which of a cheap model's requests its response cache looks at (``LookSampler``).

On a model whose call is a few tens of µs, the look itself (a hash of the inputs, the
doorkeeper's mark and the count: ~2.4-2.9 µs amid a request, a third of that in a tight loop) is
several percent of a request that misses (docs/traffic.md, "Cost of a miss"). Where nothing has
hit for ``QUIET`` looks in a row, the cache looks at one request in ``EVERY`` only: one-off
traffic then pays a 32nd of a look. Repeats still surface: a request sent again and again is
looked at one time in 32, kept at its second look (the doorkeeper), and answered from the cache
at its third (about its 100th sending), whereupon every request is looked at again. Requests
that were not looked at are counted neither as hits nor as misses (docs/metrics.md).

A request that goes by unlooked pays one test of a countdown and its decrement (``skips``): with
the cache on and sampling it costs what it costs with the cache off, within noise.

Not locked: under races a count is lost or a request looked at that need not be, which only
moves when sampling starts or stops.
"""

from __future__ import annotations

QUIET = 4096
"""Looks in a row without a hit before sampling starts: long enough that a workload with any
repeats worth keeping (a hit ratio over ~0.03 %) never samples."""
EVERY = 32
"""While sampling, one request in this many is looked at. In process (``loadtest.bench
cache_cpu``, digits, every request new) a sampled look cost the whole request +0.8-0.9 µs at 8,
+0.6 at 16 and +0.4-0.5 at 32 against the cache off: a look that comes seldom costs more than
one of many in a row (colder caches), so the rate, not the look alone, sets the cost."""


class LookSampler:
    """One cheap model's looks since its last hit, in one serving process (a dearer model's
    misses are not counted here, so it never samples)."""

    __slots__ = ("_misses", "_unlooked")

    def __init__(self) -> None:
        self._misses = 0
        self._unlooked = 0
        """While sampling, the requests still to go by before the next look."""

    def skips(self) -> bool:
        """Whether this request goes by without a look: only while sampling, and then all but one
        in ``EVERY``."""
        if self._unlooked:  # all an unlooked request pays: this test and the decrement
            self._unlooked -= 1
            return True
        if self._misses >= QUIET:  # sampling: this one is looked at, the next EVERY - 1 are not
            self._unlooked = EVERY - 1
        return False

    def missed(self) -> None:
        self._misses += 1

    def hit(self) -> None:
        self._misses = self._unlooked = 0

    @property
    def sampling(self) -> bool:
        return self._misses >= QUIET
