"""Engine errors, by kind; the service maps each kind to one HTTP status at its boundary.

Each kind carries a ``reason``: a short, fixed label for metrics (never free text, so that
label values stay bounded).
"""

from __future__ import annotations

import importlib
from typing import Any


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    reason = "engine_error"


class InvalidInput(EngineError):
    """The request's tensors do not fit the model's schema (the caller can fix it)."""

    reason = "invalid_input"

    def __init__(self, message: str, *, input_name: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name


class Overloaded(EngineError):
    """Too much work is queued already; retry after ``retry_after`` seconds."""

    reason = "queue_full"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotReady(EngineError):
    """The model is still loading or warming up, or is shutting down."""

    reason = "not_ready"


class ModelFailed(EngineError):
    """The model raised while running a valid request; details are in the server log."""

    reason = "model_error"


class NonFiniteOutput(ModelFailed):
    """The model returned NaN or infinity in a float output (only with
    ``RuntimeOptions.check_outputs``); the message names the output."""

    reason = "nonfinite_output"


class WorkerDied(ModelFailed):
    """The thread running the request died (e.g. the model raised SystemExit); the thread
    has been replaced, and the request did not complete."""

    reason = "worker_died"


class ModelLoadError(EngineError):
    """The configured model could not be loaded; the message says what to change."""

    reason = "model_load"


class ConfigError(EngineError):
    """A runtime option cannot work on this machine; the message says what to change."""

    reason = "config"


class PredictedWaitExceeded(Overloaded):
    """The work queued ahead would make this request finish after its deadline, so it was
    refused at once instead of timing out later; ``retry_after`` is the predicted drain time."""

    reason = "predicted_wait"


class DeadlineExceeded(EngineError):
    """The request's deadline passed: while queued (it never ran) or while running (the
    caller stopped waiting; the call was stopped where its backend can stop one, else it
    finished in the background)."""

    reason = "deadline"


class CallStopped(DeadlineExceeded):
    """A model call stopped midway because every request in it had stopped waiting
    (inferpool.engine.serving.call_stop). Nobody is left to hear it: a 504 should it ever reach one."""


class DeadlineBelowFloor(DeadlineExceeded):
    """The request's deadline is shorter than the model's fastest call for its sample count
    (inferpool.engine.plan.deadline_floor): it can never be met, so it is answered at once, without
    running. A 504 and not a 400: the spec's floor is a one-sample request's (a header's schema
    cannot depend on the body), and a request the spec calls valid is not refused as invalid."""

    def __init__(self, samples: int, floor_ms: int) -> None:
        super().__init__(f"the deadline is below this model's fastest call for {samples} samples ({floor_ms} ms)")
        self.samples = samples
        self.floor_ms = floor_ms


def import_optional(package: str, needed_by: str, install: str) -> Any:
    """``package``, imported; a ModelLoadError saying who needs it and how to install it (the
    ``install`` hint) when it is not installed."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise ModelLoadError(
            f"{needed_by} needs the {package!r} package, which is not installed ({exc}); install it with: {install}"
        ) from exc
