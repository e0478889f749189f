"""The Executor protocol: what runs a request's pipeline (implementations: inferpool.engine.executors)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from inferpool.engine.serving.requests import Prediction, Work


@dataclass(frozen=True)
class ExecutorConfig:
    name: str
    threads: int
    initializer: Callable[[], object]
    """Runs first on every worker thread (thread settings, a warm-up call): ready means warm."""
    max_batch_size: int = 1
    max_delay: float = 0.0
    adaptive_wait: bool = False
    """A partial batch stops waiting ``max_delay`` once its waits stop filling batches
    (inferpool.engine.executors.patience)."""
    inline_when_idle: bool = False
    """The batcher runs a request on the event loop itself when nothing is queued, forming or
    running (inferpool.engine.executors.batching)."""
    preferred: tuple[int, ...] = ()
    call_seconds: Callable[[int], float] = lambda rows: 0.0
    """Predicted seconds of a call on so many rows (the batcher leaves room for it before a deadline)."""


class Executor(Protocol):
    async def infer(self, inputs: object, deadline: float | None, request_id: str | None, level: int = 0) -> Prediction:
        """Admit one request, run it, answer it: what ``ServedModel.infer`` awaits (its
        docstring lists the errors). ``deadline`` is an absolute ``time.monotonic()``, ``level``
        its priority (inferpool.engine.serving.priorities)."""
        ...

    async def run(self, work: Work) -> Prediction:
        """Run ``work``, admitted already, through the pipeline; raises the error it was answered with."""
        ...

    @property
    def count(self) -> int:
        """Worker threads it should have (0 inline)."""
        ...

    @property
    def alive(self) -> int: ...

    @property
    def replaced(self) -> int:
        """Worker threads started to replace dead ones (running total)."""
        ...

    def close(self) -> None: ...
