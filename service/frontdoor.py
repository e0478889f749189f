"""The one front door (as KServe's DataPlane): every infer entry point (``/predict[/{name}]``,
v2 REST infer, gRPC ModelInfer, ``/v1/embeddings``) resolves its model here and hands the door
its decoded inputs; the door owns the deadline, the model call, the phase timings and their
metrics, and the one record per served model (``Served``). Entry points only decode and
encode, and no front end imports another: HTTP and gRPC both import this module.

The count of requests inside the process (``Activity``) and its check (``Activity.full``) live
here too: the HTTP middleware sheds at it before reading a body, gRPC before a call runs. A
call's own bookkeeping (counted in and out once, its id, metrics and logs) is its ``Call``'s
(service/calls.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from inferpool.engine.client import EngineClient, Prediction, room
from inferpool.engine.errors import DeadlineBelowFloor, Overloaded
from inferpool.service.asked import asked
from inferpool.service.cache_look import CacheLook
from inferpool.service.cache_sampling import LookSampler
from inferpool.service.priorities import Priorities
from inferpool.service.response_cache import Key
from inferpool.service.telemetry.logs import model_served
from inferpool.service.telemetry.metrics import Inference, Labels, Metrics
from inferpool.service.telemetry.traffic import ANSWERED, SHED, CacheTallies
from inferpool.service.timing import below_floor, deadline
from inferpool.service.v2.codec import VERSION, metadata
from inferpool.service.v2.datatypes import TensorMeta

MAX_REQUEST_ID = 128
# Either spelling: ASGI header names are bytes, gRPC metadata keys str (both lower case).
REQUEST_ID = (b"x-request-id", "x-request-id")
Pairs = Iterable[tuple[str | bytes, str | bytes]]
"""A call's HTTP headers (an ASGI scope's) or gRPC metadata: what both front ends read."""
if TYPE_CHECKING:  # the host loads models (torch); the door only asks it for them
    from inferpool.service.models.host import ModelHost

C = TypeVar("C")
T = TypeVar("T")


class Activity:
    """Requests whose body has arrived and whose answer is not yet sent (GETs are not
    counted), over both front ends; the drain on SIGTERM waits for zero."""

    def __init__(self) -> None:
        self.active = 0
        """Changed only by the calls themselves (service/calls.py: ``Call.enter``, ``Call.answered``)."""
        self.limit: int | None = None
        """Most requests inside the process before new ones are shed at the door; None while
        the models load."""
        self.closing = False
        """Draining: every answer says ``Connection: close``, so that a keep-alive client's
        next request goes to a new connection (another replica) instead of meeting a socket
        this process closes under it."""
        self.priorities = Priorities()
        """Request priority levels: a lower level is shed with less inside (``full``)."""

    def admit(self, capacity: int) -> None:
        """A model is ready: it holds ``capacity`` requests (runtimes + its queue).

        The door counts every request inside the process, not only those in the engine: under
        a load the event loop cannot keep up with, the pile-up is in front of the engine. Of
        the variants measured (also a door at twice the capacity, and one counting only the
        requests outside the engine, so up to twice the capacity inside), this one answered
        admitted requests soonest and missed the fewest deadlines (docs/BENCHMARKS.md, "Figures
        moved from the code"). Its cost: clients right at the capacity can be refused (raise
        ``max_queue`` for such fleets)."""
        self.limit = (self.limit or 0) + capacity

    def full(self, level: int = 0) -> int | None:
        """The door's limit for a request of priority ``level`` when the process holds that many
        requests already (the caller sheds the new one), else None: the one check both front
        ends make. The lowest level is shed first (inferpool.engine.serving.priorities.room)."""
        limit = self.limit
        if limit is not None and level > 1:
            limit = room(limit, level, self.priorities.levels)
        return limit if limit is not None and self.active >= limit else None

    def level_of(self, header: bytes | None) -> int:
        """The level ``full`` takes for a request whose X-Request-Priority header is ``header``: 0
        with one level; a bad one counts as the default here (the front door answers it 400)."""
        priorities = self.priorities
        return priorities.lenient(header) if priorities.on else 0


def shed_message(limit: int) -> str:
    return f"overloaded: {limit} requests are already in progress; retry later or elsewhere"


@dataclass(slots=True, eq=False)
class Served:
    """One served model as the front ends see it, made once when it is ready: its version,
    its metrics labels and (on its first v2 request) the inputs its v2 metadata declares."""

    model: EngineClient
    name: str
    version: str
    """As v2 metadata and answers give it ("1" for the config's models)."""
    labels: Labels
    """(name, version label) of its log lines and series ("" for the config's models)."""
    cached: CacheTallies | None = None
    """Where its response cache hits and misses are counted; None when the door's cache holds
    none of its answers (service/response_cache.py)."""
    sampler: LookSampler = field(default_factory=LookSampler)
    """Which of its requests the cache looks at, for a cheap model (service/cache_sampling.py)."""
    _expected: dict[str, TensorMeta] | None = None

    def expected(self) -> dict[str, TensorMeta]:
        """What a v2 request's inputs must match (REST and gRPC check against it)."""
        found = self._expected
        if found is None:
            info = self.model
            inputs = metadata(info.name, info.schema, VERSION, info.info.handler)["inputs"]
            found = self._expected = TensorMeta.table(inputs)
        return found


Encoder = Callable[[Served, Mapping[str, Any], C], T]
"""An entry point's encoding of a model's outputs (with what it decoded, ``C``)."""
Looked = tuple[int, Key | None, Any]
"""A request's priority level, its response cache key (None: not looked up) and the answer the
cache holds for it (None: a miss, or not looked up): ``FrontDoor.look``'s."""


class ModelReadiness(NamedTuple):
    name: str
    version: str
    """As v2 metadata gives it."""
    ready: bool


class FrontDoor:
    def __init__(self, host: ModelHost, metrics: Metrics, activity: Activity) -> None:
        self.host = host
        self.metrics = metrics
        self.activity = activity
        settings = host.settings
        self.timeout_ms = settings.request_timeout_ms
        self.priorities = Priorities(settings.priority_levels, settings.default_priority)
        activity.priorities = self.priorities
        self.cache_look = CacheLook.of_megabytes(settings.response_cache_mb)
        """None: the cache is off (or, for the warm door, never consulted)."""
        self._cached_models = settings.response_cache_models
        self._served: dict[EngineClient, Served] = {}

    def add(self, model: EngineClient) -> Served:
        """``model`` serves (the host's ``on_ready``): its record; the host's plan gives its version."""
        host = self.host
        names = self._cached_models
        cached = self.cache_look is not None and (names is None or model.name in names)
        tallies = self.metrics.traffic.cache_tallies(model.name) if cached else None
        served = self._served[model] = Served(
            model, model.name, host.version_of(model), (model.name, host.version_label(model)), tallies
        )
        return served

    @property
    def cache_bytes(self) -> int:
        return 0 if self.cache_look is None else self.cache_look.cache.bytes

    def of(self, model: EngineClient) -> Served:
        return self._served.get(model) or self.add(model)

    def served(self) -> list[Served]:
        """Every version served, for a scrape."""
        return [self.of(model) for model in self.host.all_models()]

    # What the front ends answer besides infer, as KServe's DataPlane does: REST's v2 routes and
    # gRPC's methods ask the same questions here, so they cannot answer them differently.
    @property
    def live(self) -> bool:
        """The process can serve at all (a failed load needs a restart)."""
        return self.host.status.live

    @property
    def ready(self) -> bool:
        return self.host.status.ready

    def model_ready(self, name: str, version: str | None = None) -> ModelReadiness:
        """Whether the model ``name`` at ``version`` (its latest without) takes requests whichever
        serving process gets them; NotReady while not serving, 404 for a model or version not served."""
        host = self.host
        model = host.get(name, version)
        return ModelReadiness(model.name, host.version_of(model), host.ready(model))

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        """The model's v2 metadata (its inputs and outputs); NotReady, or 404, as ``model_ready``."""
        host = self.host
        model = host.get(name, version)
        return metadata(model.name, model.schema, host.version_of(model), model.info.handler)

    def resolve(self, name: str | None = None, version: str | None = None) -> Served:
        """The model by name (the default one without) and version (the latest without);
        NotReady (503) while not serving, 404 for a model or version not served."""
        if name is None:  # /predict's: the record already knows the labels ModelHost.get would look up
            served = self.of(self.host.serving())
            model_served.set(served.labels)  # this request's logs and metrics, as ModelHost.get sets them
            return served
        return self.of(self.host.get(name, version))

    async def infer(
        self, served: Served, inputs: object, encode: Encoder[C, T], decoded: C, *, received: float, parsed: float,
        rid: str | None, timeout: bytes | None = None, timeout_ms: float | None = None, remaining: float | None = None,
        priority: object = None, looked: Looked | None = None,
    ) -> tuple[T, Inference]:  # fmt: skip
        """Run the request and encode its answer: ``timeout`` is the X-Request-Timeout-Ms header,
        ``timeout_ms`` and ``priority`` the v2 parameters, ``remaining`` a gRPC caller's own
        deadline (seconds); ``received``/``parsed`` when the body began to arrive and when it was
        decoded. A repeated request is answered from the response cache, when it is on;
        ``looked``: what ``look`` found already, for a caller that looked before it made a task."""
        level, key, found = looked or self.look(served, inputs, encode, decoded, priority)
        if found is not None:
            return found, self.hit(served, received, parsed)
        when, field = self.deadline_of(served, timeout, timeout_ms, remaining)
        try:
            prediction = await served.model.infer(inputs, when, rid, level)
        except DeadlineBelowFloor as exc:  # a request of more samples than one: its floor, once counted
            raise below_floor(exc, field) from None
        except Overloaded:
            self._shed(level)
            raise
        return self.answer(served, prediction, encode, decoded, received, parsed, level, key)

    def infer_inline(
        self, served: Served, inputs: object, encode: Encoder[C, T], decoded: C, *, received: float, parsed: float,
        rid: str | None, timeout: bytes | None = None, timeout_ms: float | None = None, remaining: float | None = None,
        priority: object = None,
    ) -> tuple[T, Inference]:  # fmt: skip
        """``infer`` for a model whose requests run inline (``served.model.inline``), without a
        coroutine: the HTTP lane answers such requests from the parser's callbacks, the native
        gRPC front end from its batch of calls."""
        level, key, found = self.look(served, inputs, encode, decoded, priority)
        if found is not None:
            return found, self.hit(served, received, parsed)
        when, field = self.deadline_of(served, timeout, timeout_ms, remaining)
        try:
            prediction = served.model.infer_inline(inputs, when, rid)
        except DeadlineBelowFloor as exc:
            raise below_floor(exc, field) from None
        return self.answer(served, prediction, encode, decoded, received, parsed, level, key)

    def look(self, served: Served, inputs: object, encode: Encoder[C, T], decoded: C, priority: object) -> Looked:
        """What the door decides before the engine: the request's level (a 400 for a bad one)
        and whether the response cache answers it (``Looked``)."""
        what = asked.get()
        level = self.priorities.level(priority, what.priority) if self.priorities.on else 0
        cache_look, tallies = self.cache_look, served.cached
        # Cheapest first: a request its model's sampler skips costs what it costs with the cache off.
        if cache_look is None or tallies is None or (what.cache_control is not None and what.no_cache):
            return level, None, None
        if served.sampler.skips():
            return level, None, None
        key, found = cache_look.look(served, tallies, inputs, encode, decoded)
        if found is not None and level:
            self.metrics.traffic.prioritised(level, ANSWERED, 0.0)
        return level, key, found

    def hit(self, served: Served, received: float, parsed: float) -> Inference:
        """A cached answer's phases: its decoding only (no queue, no model, no encoding)."""
        marks = (received, parsed, time.perf_counter(), time.monotonic())  # a trace's empty queue and model spans
        return Inference(served.name, parsed - received, 0.0, 0.0, 0.0, 0, 0.0, marks, served.labels[1])

    def _shed(self, level: int) -> None:
        if level:
            self.metrics.traffic.prioritised(level, SHED)

    def deadline_of(
        self, served: Served, timeout: bytes | None, timeout_ms: float | None, remaining: float | None
    ) -> tuple[float | None, str | None]:
        """The request's absolute deadline, and the field it came from (for a floor's error)."""
        when = deadline(timeout, self.timeout_ms, timeout_ms, floor_ms=served.model.deadline_floor_ms)
        field = "parameter 'timeout'" if timeout_ms is not None else "X-Request-Timeout-Ms" if timeout else None
        channel = None if remaining is None else time.monotonic() + remaining
        if channel is not None and (when is None or channel < when):
            when, field = channel, None  # a gRPC channel's own deadline
        return when, field

    def answer(
        self, served: Served, prediction: Prediction, encode: Encoder[C, T], decoded: C, received: float, parsed: float,
        level: int, key: Key | None,
    ) -> tuple[T, Inference]:  # fmt: skip
        """The engine's ``prediction`` as the route's answer: encoded, kept under ``key`` when the
        response cache holds it, and the request's phases."""
        encoding = time.perf_counter()
        body = encode(served, prediction.outputs, decoded)
        encoded = time.perf_counter()
        if key is not None and self.cache_look is not None:
            self.cache_look.keep(key, body)
        if level:
            self.metrics.traffic.prioritised(level, ANSWERED, encoded - received)
        inference = Inference(
            served.name,
            parsed - received + prediction.validate_seconds,
            prediction.queue_seconds,
            prediction.compute_seconds,
            encoded - encoding,
            prediction.batch_size,
            prediction.batch_seconds,
            (received, parsed, encoding, prediction.dispatched),
            served.labels[1],
        )
        metrics = self.metrics
        metrics.observe_inference(inference)
        metrics.refresh(served.model, served.labels)
        return body, inference


def client_request_id(pairs: Pairs) -> str | None:
    """The caller's own ``x-request-id``, from HTTP headers or gRPC metadata; None when it
    sent none or one unfit to echo (see MAX_REQUEST_ID)."""
    for name, value in pairs:
        if name in REQUEST_ID:
            return echoable_request_id(value)
    return None


def echoable_request_id(value: str | bytes) -> str | None:
    """A caller's request id as it is echoed, None when unfit (see MAX_REQUEST_ID)."""
    text = value if isinstance(value, str) else value.decode("latin-1")
    # Echoed into logs and headers: keep it short and printable.
    return text if 0 < len(text) <= MAX_REQUEST_ID and text.isprintable() else None


def request_ids(serial: Iterator[int], tag: str = "") -> Iterator[str]:
    """Generated request ids: unique across processes and restarts (the process id and the time
    this is called, then ``serial``) and cheaper than a uuid4 per request. Call it in the
    serving process (after the fork); ``tag`` keeps generators on separate serials apart."""
    prefix = f"{os.getpid():x}-{tag}{int(time.time()):x}-"  # once: per id it would cost more than the serial
    return (prefix + str(n) for n in serial)
