"""One request's deadline, from its own timeout (the X-Request-Timeout-Ms header, the v2
parameter) or the server's default, checked against the model's floor: what the front door
computes for every entry point."""

from __future__ import annotations

import re
import time

from inferpool.engine.client import MIN_FLOOR_MS
from inferpool.engine.errors import DeadlineBelowFloor, DeadlineExceeded
from inferpool.service.apierror import ApiError

TIMEOUT_HEADER = b"x-request-timeout-ms"
MIN_TIMEOUT_MS = MIN_FLOOR_MS
"""The least any model takes: each model's own floor (EngineClient.deadline_floor_ms) is at least this."""
# ASCII digits only, no leading zero (so 1 ms or more, as the spec's pattern says): int() alone
# would also take " 5", "+5", "1_000" and non-ASCII digits, none of which a client means as a
# timeout. At most 19 digits: ~317 million years, and int() of a long digit string is slow.
TIMEOUT_PATTERN = "^[1-9][0-9]{0,18}$"
_TIMEOUT_SYNTAX = re.compile(TIMEOUT_PATTERN.strip("^$").encode())
MAX_DIGITS = 19


def deadline(
    header: bytes | None, default_ms: float, override_ms: float | None = None, floor_ms: int = MIN_TIMEOUT_MS
) -> float | None:
    """Absolute ``time.monotonic()`` deadline: the request's own timeout (the v2 parameter,
    else the X-Request-Timeout-Ms header), else the default. A timeout the model can never meet
    (under ``floor_ms``, its fastest call at start-up: inferpool.engine.plan.deadline_floor) is a 400
    naming the field, at once: not admitted and answered 504 when it passes."""
    header_ms = None if header is None else _header_ms(header, floor_ms)  # checked even when the parameter wins
    if override_ms is not None:  # its syntax was checked where it was parsed (inferpool.service.v2.datatypes)
        if override_ms < floor_ms:
            raise ApiError(400, f"parameter 'timeout' {round(override_ms * 1e3)} µs {_below(floor_ms, 1000)}",
                           "invalid_input")  # fmt: skip
        return time.monotonic() + override_ms / 1e3
    if header_ms is None:
        return time.monotonic() + default_ms / 1e3 if default_ms else None
    return time.monotonic() + header_ms / 1e3


def _header_ms(header: bytes, floor_ms: int) -> int:
    if not _TIMEOUT_SYNTAX.fullmatch(header):
        given = header.decode("latin-1")
        message = (f"X-Request-Timeout-Ms {given!r} must be an unsigned integer of milliseconds, "
                   f"{floor_ms} or more, like 250")  # fmt: skip
        raise ApiError(400, message, "invalid_input")
    value = int(header)
    if value < floor_ms:
        raise ApiError(400, f"X-Request-Timeout-Ms {value} {_below(floor_ms, 1)}", "invalid_input")
    return value


def below_floor(exc: DeadlineBelowFloor, field: str | None) -> DeadlineExceeded:
    """The 504, at once, for a request of several samples whose deadline is under the model's
    floor for that many, naming where the deadline came from: the v2 ``timeout`` parameter (µs),
    the header (ms), or None (the server's own ``request_timeout_ms``, a gRPC channel's)."""
    unit = 1000 if field == "parameter 'timeout'" else 1
    sent = f"{field} is" if field else "the deadline is"
    advice = f"; send at least {exc.floor_ms * unit} or omit it" if field else ""
    return DeadlineExceeded(f"{sent} below this model's fastest measured call for {exc.samples} samples "
                            f"({exc.floor_ms} ms): answered at once, without running{advice}")  # fmt: skip


def _below(floor_ms: int, unit: int) -> str:
    return f"is below this model's fastest measured call ({floor_ms} ms); send at least {floor_ms * unit} or omit it"


def at_least_pattern(floor: int) -> str:
    """A regular expression of the decimal integers from ``floor`` to MAX_DIGITS digits, as the
    header takes them (no sign, no leading zero): the spec's exact form of a per-model floor."""
    digits = str(floor)
    width = len(digits)
    # Longer numbers are all larger; of the same length, those that first exceed it at digit i.
    alternatives = [f"[1-9][0-9]{{{width},{MAX_DIGITS - 1}}}"] if width < MAX_DIGITS else []
    alternatives.append(digits)
    for i, digit in enumerate(digits):
        if digit == "9":
            continue
        rest = width - i - 1
        tail = f"[0-9]{{{rest}}}" if rest else ""
        alternatives.append(f"{digits[:i]}[{int(digit) + 1}-9]{tail}")
    return "^(" + "|".join(alternatives) + ")$"
