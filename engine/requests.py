"""The unit of work between the front end and the workers: a queued request and its answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.schema import Array


@dataclass(frozen=True, slots=True)
class Prediction:
    """A request's answer and where its time went (the service turns these into metrics)."""

    outputs: dict[str, Array]
    single: bool
    """The request was one sample without a batch dimension; so are ``outputs``."""
    batch_size: int
    """Samples in the model call this request rode in (its own and any batched with it)."""
    queue_seconds: float
    """From submission until a worker picked the request up."""
    validate_seconds: float
    """Checking the inputs against the schema and converting them to arrays."""
    compute_seconds: float
    """Borrowing a runtime and running the model (with batching: also concatenating and slicing)."""
    batch_seconds: float = 0.0
    """Waiting for the batch to form, after validation (0 when batching is off)."""


Coerce = Callable[[object], tuple[dict[str, Array], bool]]
Run = Callable[[Mapping[str, Array]], dict[str, Array]]
Prepare = Callable[[object], tuple[object, object]]
"""A model handler's preprocess, before ``coerce``: payload -> (model inputs, context)."""
Finish = Callable[[dict[str, Array], object], dict[str, Array]]
"""A model handler's postprocess, on one request's rows: (outputs, context) -> outputs."""


class Request:
    """One submitted request while the batcher holds it: its payload until validated, then its
    arrays, and the future its caller awaits."""

    __slots__ = (
        "arrays",
        "context",
        "deadline",
        "dequeued",
        "estimate",
        "future",
        "inputs",
        "loop",
        "queued",
        "rows",
        "single",
        "validate",
    )

    def __init__(
        self, inputs: object, estimate: int, deadline: float | None, future: asyncio.Future[Prediction]
    ) -> None:
        self.inputs = inputs
        self.estimate = estimate  # the sample count admission counted in; given back as is
        self.deadline = deadline
        self.future = future
        self.loop = future.get_loop()
        self.queued = time.monotonic()
        self.dequeued = 0.0
        self.arrays: dict[str, Array] = {}
        self.context: object = None
        self.single = False
        self.rows = 0
        self.validate = 0.0
