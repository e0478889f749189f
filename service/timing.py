"""One request's deadline, from its own timeout (the X-Request-Timeout-Ms header, the v2
parameter) or the server's default: what every front end hands the front door."""

from __future__ import annotations

import re
import time

from inferpool.service.apierror import ApiError

TIMEOUT_HEADER = b"x-request-timeout-ms"
MIN_TIMEOUT_MS = 1
"""Below 1 ms no model here can answer (decoding a request alone takes tens of µs): such a
deadline is refused as invalid (400) at once, not answered 504 after admission."""
# ASCII digits only, no leading zero (so 1 ms or more, as the spec's pattern says): int() alone
# would also take " 5", "+5", "1_000" and non-ASCII digits, none of which a client means as a
# timeout. At most 19 digits: ~317 million years, and int() of a long digit string is slow.
TIMEOUT_PATTERN = "^[1-9][0-9]{0,18}$"
_TIMEOUT_SYNTAX = re.compile(TIMEOUT_PATTERN.strip("^$").encode())


def deadline(header: bytes | None, default_ms: float, override_ms: float | None = None) -> float | None:
    """Absolute ``time.monotonic()`` deadline: the request's own timeout (the v2 parameter,
    else the X-Request-Timeout-Ms header), else the default."""
    header_ms = None if header is None else _header_ms(header)  # checked even when the parameter wins
    if override_ms is not None:  # checked where it was parsed (inferpool.service.v2types.timeout_ms)
        return time.monotonic() + override_ms / 1e3
    if header_ms is None:
        return time.monotonic() + default_ms / 1e3 if default_ms else None
    return time.monotonic() + header_ms / 1e3


def _header_ms(header: bytes) -> int:
    if not _TIMEOUT_SYNTAX.fullmatch(header):
        given = header.decode("latin-1")
        message = (f"X-Request-Timeout-Ms {given!r} must be an unsigned integer of milliseconds, "
                   f"{MIN_TIMEOUT_MS} or more, like 250")  # fmt: skip
        raise ApiError(400, message, "invalid_input")
    return int(header)
