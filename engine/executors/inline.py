"""The ``inline`` executor: a request's pipeline runs on the event loop itself, no hand-off."""

from __future__ import annotations

import asyncio

from inferpool.engine.executors.base import ExecutorConfig
from inferpool.engine.serving.pipeline import Pipeline
from inferpool.engine.serving.requests import Prediction, Work, answer


class InlineExecutor:
    count = alive = replaced = 0

    def __init__(self, pipeline: Pipeline, config: ExecutorConfig | None = None) -> None:
        self.pipeline = pipeline

    async def infer(self, inputs: object, deadline: float | None, request_id: str | None, level: int = 0) -> Prediction:
        # Nothing waits on the event loop: nothing to order by priority.
        return self.pipeline.inline(inputs, deadline, request_id)

    async def run(self, work: Work) -> Prediction:
        outcome, died = self.pipeline.one(work)
        if isinstance(died, KeyboardInterrupt | asyncio.CancelledError):
            raise died
        # Any other BaseException from the model arrives as WorkerDied: on the event loop a
        # model's SystemExit would otherwise stop the whole server.
        return answer(outcome)

    def close(self) -> None:
        pass
