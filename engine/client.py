"""The engine's narrow, typed client: all a front end (HTTP, gRPC, a benchmark) may use.

A front end asks a model for its ``name`` and ``schema``, awaits ``infer``, reads ``info``
(what is serving, fixed at load) and ``stats()`` (live counts, cheap enough for every scrape),
and calls ``close``. Nothing else: no pool, plan, module or backend objects cross this line,
so the engine can change how it runs a request without touching a front end.

It is also where a front end takes the types it exchanges with a model (``Prediction``,
``Schema``, ``Handler`` ...) and the request-id context: a front end imports this module and
``inferpool.engine.errors`` only (ruff's banned-api rule in pyproject.toml holds service/ to
it), and neither imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from inferpool.engine.models.handlers import Handler, TextEmbedding, TokenIds
from inferpool.engine.models.text_api import (
    ACTIVATIONS,
    TextClassification,
    TextInputs,
    TextPairs,
    TextRerank,
    TextTokenizer,
    Token,
)
from inferpool.engine.schema import Array, Schema, TensorSpec
from inferpool.engine.serving.priorities import room
from inferpool.engine.serving.requests import Outcome, Prediction, request_id

NOT_BLANK = r"[^\t-\r\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""The JSON-Schema pattern of a text that is not blank as the handlers judge it (Python's
``str.strip``): one character outside Python's whitespace. Not ``\\S``, whose meaning differs
between regex dialects: a validator in ECMAScript's counts U+001C-U+001F as non-blank, which
Python strips (schemathesis sent "\\u001d", the spec said valid, the server said empty)."""

MIN_FLOOR_MS = 1
"""No deadline under 1 ms is met by any model here (decoding a request alone takes tens of µs);
each model's ``deadline_floor_ms`` is at least this (inferpool.engine.plan.deadline_floor)."""

__all__ = [
    "ACTIVATIONS",
    "MIN_FLOOR_MS",
    "NOT_BLANK",
    "Array",
    "EngineClient",
    "Handler",
    "ModelInfo",
    "ModelStats",
    "Prediction",
    "Schema",
    "TensorSpec",
    "TextClassification",
    "TextEmbedding",
    "TextInputs",
    "TextPairs",
    "TextRerank",
    "TextTokenizer",
    "Token",
    "TokenIds",
    "request_id",
    "room",
]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """How a model is served; fixed once it is loaded."""

    name: str
    backend: str
    """The backend serving it (for ``auto``: the one chosen)."""
    dispatch: str
    """The executor running its requests: ``inline``, ``threads`` or ``batch``."""
    max_batch_size: int
    runtimes: int
    intra_op_threads: int
    usable_cpus: int
    capacity: int
    """Requests it holds at once: runtimes + max_queue (more are refused)."""
    torch_version: str
    handler: Handler | None = None
    """Pre- and post-processing around the model (None: tensors in and out)."""
    backend_selection: dict[str, Any] | None = None
    """For ``auto``: the table the backend was chosen from."""
    dispatch_selection: dict[str, Any] | None = None
    """For ``dispatch = "auto"``: the figures the executor was chosen from."""
    batch_selection: dict[str, Any] | None = None
    """``max_batch_size`` as served, configured (0: chosen at start-up), the rule, why and its figures."""
    wide_selection: dict[str, Any] | None = None
    """Whether a call running alone in the pod uses every core, and the figures it was chosen from."""
    precision_selection: dict[str, Any] | None = None
    """For ``precision = "int8"``: the precision served and the accuracy gate's figures."""
    deadline_floor_ms: int = 1
    """The shortest deadline it can meet: its fastest call at start-up, in whole ms (rounded up)."""

    @property
    def threads(self) -> int:
        return self.runtimes * self.intra_op_threads

    def labels(self) -> dict[str, str]:
        """The facts as strings, for a log line or an info metric."""
        return {
            "model": self.name,
            "backend": self.backend,
            "dispatch": self.dispatch,
            "max_batch_size": str(self.max_batch_size),
            "runtimes": str(self.runtimes),
            "intra_op_threads": str(self.intra_op_threads),
            "usable_cpus": str(self.usable_cpus),
            "torch_version": self.torch_version,
        }


@dataclass(frozen=True, slots=True)
class ModelStats:
    """A model's live state, read without locks (each field is one racy read)."""

    in_flight: int
    """Requests accepted and not yet answered."""
    runtimes: int
    """Runtimes in the pool now (the planned number unless one could not be rebuilt)."""
    planned_runtimes: int
    busy_runtimes: int
    idle_runtimes: int
    worker_threads: int
    """Threads its executor should have (0 when it runs inline on the event loop)."""
    live_workers: int
    replaced_runtimes: int
    """Runtimes rebuilt after the model raised on them (running total)."""
    failed_replacements: int
    replaced_workers: int
    """Worker threads restarted after one died (running total)."""
    accepting: bool
    wide_calls: int = 0
    """Calls that ran alone on the wide lane, every core (inferpool.engine.plan.wide; running total)."""
    abandoned: int = 0
    """Requests dropped unrun because their caller had stopped waiting: its client left or its
    deadline passed while it was queued (running total)."""
    stopped_calls: int = 0
    """Model calls stopped midway because every request in them had stopped waiting (running
    total; inferpool.engine.serving.call_stop)."""

    @property
    def queued(self) -> int:
        return max(0, self.in_flight - self.busy_runtimes)

    @property
    def healthy(self) -> bool:
        """Every worker thread alive and every runtime in the pool: False means the model
        cannot serve at full capacity and will not recover by itself, or it is closed."""
        return self.accepting and self.live_workers == self.worker_threads and self.runtimes == self.planned_runtimes


class EngineClient(Protocol):
    """What a front end holds for one served model."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> Schema: ...

    @property
    def info(self) -> ModelInfo: ...

    deadline_floor_ms: int
    """A request's deadline below this many ms is invalid (inferpool.engine.plan.deadline_floor): read
    on every request, so a plain attribute, not a field of ``info`` (which is built on each read)."""

    inline: bool
    """Whether its requests run on the event loop thread itself: then ``infer_inline`` answers
    one without a coroutine (read on every request, so a plain attribute)."""

    async def infer(
        self, inputs: object, deadline: float | None = None, request_id: str | None = None, level: int = 0
    ) -> Prediction:
        """Run one request: ``inputs`` as decoded (JSON value or named arrays), ``deadline`` an
        absolute ``time.monotonic()`` (None: none), ``request_id`` for the engine's logs, ``level``
        its priority (1 the highest; 0 none: inferpool.engine.serving.priorities)."""
        ...

    def infer_inline(self, inputs: object, deadline: float | None = None, request_id: str | None = None) -> Prediction:
        """``infer``'s answer, computed now, on the calling (event loop) thread; only for a model
        whose ``inline`` is True."""
        ...

    def infer_inline_together(self, requests: Sequence[tuple[object, float | None, str | None]]) -> list[Outcome]:
        """``infer_inline`` for requests that arrived together, each ``(inputs, deadline,
        request_id)``: one outcome each, in order, its Prediction or the error it is answered
        with (one request's error never fails another); run as one model call where they stack."""
        ...

    def stats(self) -> ModelStats: ...

    def close(self) -> None: ...
