"""The front door's ``infer_inline`` for requests that arrived together: one engine call per model.

A front end that answers several decoded requests for inline models at once (the HTTP lane: all
those whose bodies completed in one loop wake-up) holds each here instead of calling
``FrontDoor.infer_inline``. Holding does what the door does before the engine, per request and in
its own context (its level, the response cache, its deadline: errors raised at once, to that
request's caller); ``run`` then hands each model's held requests to the engine together
(``EngineClient.infer_inline_together``: stacked into one model call where they stack) and answers
each as ``infer_inline`` would have: its encode, metrics and phases, or its own error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from inferpool.engine.errors import DeadlineBelowFloor
from inferpool.service.frontdoor import Encoder, FrontDoor, Served
from inferpool.service.response_cache import Key
from inferpool.service.telemetry.metrics import Inference
from inferpool.service.timing import below_floor

Answered = tuple[Any, Inference] | Exception
"""A held request's answer: what ``FrontDoor.infer_inline`` returns, or the error it raises."""


class _Held(NamedTuple):
    """A request as ``FrontDoor.infer_inline`` has it when the engine's call comes."""

    inputs: object
    encode: Encoder[Any, Any]
    decoded: object
    received: float
    parsed: float
    """When its body began to arrive, and when it was decoded (``time.perf_counter()``)."""
    rid: str | None
    when: float | None
    """Its deadline (``time.monotonic()``)."""
    field: str | None
    """Where its deadline came from, for a floor's error."""
    level: int
    key: Key | None
    """Its response cache key, when the cache is on for it."""
    then: Callable[[Answered], None]
    """What answers it, given its answer or its error."""


class Together:
    """Inline requests held to run together, by model, until ``run``."""

    __slots__ = ("door", "held")

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self.held: dict[Served, list[_Held]] = {}

    def hold(
        self, served: Served, inputs: object, encode: Encoder[Any, Any], decoded: object, *, received: float,
        parsed: float, rid: str | None, then: Callable[[Answered], None], timeout: bytes | None = None,
        timeout_ms: float | None = None, priority: object = None,
    ) -> tuple[Any, Inference] | None:  # fmt: skip
        """``FrontDoor.infer_inline``'s arguments: its answer now if the response cache has it,
        else None, and ``then`` gets it at ``run``. Raises what ``infer_inline`` raises before the engine."""
        door = self.door
        level, key, found = door.look(served, inputs, encode, decoded, priority)
        if found is not None:
            return found, door.hit(served, received, parsed)
        when, field = door.deadline_of(served, timeout, timeout_ms, None)
        held = _Held(inputs, encode, decoded, received, parsed, rid, when, field, level, key, then)
        self.held.setdefault(served, []).append(held)
        return None

    def run(self) -> None:
        """Every held request through the engine, each model's together, each answered by its ``then``."""
        door = self.door
        for served, held in self.held.items():
            outcomes = served.model.infer_inline_together([(h.inputs, h.when, h.rid) for h in held])
            for request, outcome in zip(held, outcomes, strict=True):
                answered: Answered
                if isinstance(outcome, DeadlineBelowFloor):
                    answered = below_floor(outcome, request.field)
                elif isinstance(outcome, Exception):
                    answered = outcome
                elif isinstance(outcome, BaseException):
                    raise outcome  # the engine hands back no other kind: KeyboardInterrupt & co propagate there
                else:
                    try:
                        answered = door.answer(
                            served, outcome, request.encode, request.decoded, request.received, request.parsed,
                            request.level, request.key,
                        )  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 -- this request's answer: its caller maps it
                        answered = exc
                request.then(answered)
        self.held.clear()
