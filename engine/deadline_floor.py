"""The shortest deadline a model can ever meet: its fastest call measured at start-up.

A deadline below it is refused as invalid (400, naming the field) by the front ends
(inferpool.service.timing), instead of being admitted and answered 504 when it passes: no
amount of retrying makes such a request succeed, so it is the caller's mistake, not a
transient server state. Whole milliseconds, rounded up: the header is an integer of ms, and
any integer below the rounded-up figure is below every call the model made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from inferpool.engine.client import MIN_FLOOR_MS
from inferpool.engine.wide import WideChoice

__all__ = ["MIN_FLOOR_MS", "floor_ms"]


def floor_ms(call_seconds: Iterable[float], wide: WideChoice | None = None) -> int:
    """The floor in whole ms from the one-sample calls timed at start-up (``call_seconds``), and
    the wide lane's one-sample time when a call alone may take it (it can be the fastest)."""
    fastest = min(call_seconds)
    if wide is not None and wide.enabled and wide.min_rows == 1 and wide.wide_ms is not None:
        fastest = min(fastest, wide.wide_ms / 1e3)
    # round() first: 7.0000000001 ms of float noise is 7, not 8.
    return max(MIN_FLOOR_MS, math.ceil(round(fastest * 1e3, 6)))
