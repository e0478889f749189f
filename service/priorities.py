"""A request's priority level as the front door resolves it: Triton's v2 ``priority`` parameter
(REST's ``parameters.priority``, gRPC's) or the ``X-Request-Priority`` header, 1 the highest,
0 or none given the configured ``default_priority``; anything else a 400 that says what to send.
The engine orders and sheds by the level (inferpool.engine.serving.priorities)."""

from __future__ import annotations

from dataclasses import dataclass

from inferpool.service.apierror import ApiError
from inferpool.service.v2.codec import whole_number

_REASON = "invalid_priority"


@dataclass(frozen=True, slots=True)
class Priorities:
    levels: int = 1
    default: int = 1

    @property
    def on(self) -> bool:
        """More than one level: requests are told apart (and counted by level)."""
        return self.levels > 1

    def level(self, parameter: object, header: bytes | str | None) -> int:
        """The level of a request whose v2 parameter was ``parameter`` (None: not sent) and whose
        X-Request-Priority header was ``header``; the parameter wins when both came."""
        if parameter is not None:
            return self._checked(parameter, "parameter 'priority'")
        if header is None:
            return self.default
        text = header.decode("latin-1") if isinstance(header, bytes) else header
        stripped = text.strip(" \t")  # HTTP's optional whitespace, as the spec says (service/http/traffic_spec.py)
        if not (stripped.isascii() and stripped.isdigit() and len(stripped) <= 4):
            raise self._bad(f"X-Request-Priority {text!r} is not a whole number")
        return self._checked(int(stripped), "X-Request-Priority")

    def lenient(self, header: bytes | None) -> int:
        """``level`` of the header alone, the default for a bad one: for the door's count, before
        the request is read (the front door refuses the bad one after)."""
        try:
            return self.level(None, header)
        except ApiError:
            return self.default

    def _checked(self, value: object, field: str) -> int:
        # An integer as JSON Schema counts them, as v2's "timeout" takes it: 2 and 2.0 alike (the
        # spec's "integer" cannot tell them apart), never a boolean (an int to Python only).
        level = whole_number(value)
        if level is None:
            raise self._bad(f"{field} must be a whole number; got {value!r}")
        if level == 0:
            return self.default
        if not 0 < level <= self.levels:
            raise self._bad(f"{field} {value!r} is not a level of this server")
        return level

    def _bad(self, problem: str) -> ApiError:
        levels = self.levels
        spread = "1 (the only level)" if levels == 1 else f"1 (the highest) to {levels} (the lowest)"
        return ApiError(400, f"{problem}: send {spread}, or 0 for the default ({self.default})", _REASON)
