"""Pipelines around fake models, for executor tests: a schema of one float input ``x`` of any
shape with a batch dimension, the fake's ``run`` as the runtimes, and every release recorded."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from inferpool.engine.models.handlers import Handler
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array, Schema, TensorSpec
from inferpool.engine.serving.admission import Admission, ServiceTimes
from inferpool.engine.serving.pipeline import Pipeline

SCHEMA = Schema(inputs=(TensorSpec("x", "float32", (None, None)),), outputs=(TensorSpec("y", "float32", (None, None)),))


class Recorded(Admission):
    """Admission that records every release (the sample count given back)."""

    def __init__(self, max_batch_size: int = 1) -> None:
        super().__init__(ServiceTimes(), 1, max_batch_size, capacity=64)
        self.released: list[int] = []

    def leave(self, samples: int) -> None:
        self.released.append(samples)


class _Runs:
    def __init__(self, run: Callable[[Mapping[str, Array]], dict[str, Array]]) -> None:
        self.run = run

    def alone_on_wide_lane(self) -> bool:
        return False


class _Prepares(Handler):
    def __init__(self, preprocess: Callable[[Any], Any]) -> None:
        self._preprocess = preprocess

    def preprocess(self, payload: object) -> tuple[dict[str, Array], object]:
        return self._preprocess(payload), None

    def postprocess(self, outputs: Mapping[str, Array], context: object) -> dict[str, Array]:
        return dict(outputs)


def fake_pipeline(
    run: Callable[[Mapping[str, Array]], dict[str, Array]],
    admission: Admission | None = None,
    preprocess: Callable[[Any], Any] | None = None,
) -> Pipeline:
    """``preprocess``, if given, runs as the model's handler (payload -> {"x": ...})."""
    handler = None if preprocess is None else _Prepares(preprocess)
    return Pipeline("fake", SCHEMA, _Runs(run), admission or Recorded(), RuntimeOptions(), handler)
