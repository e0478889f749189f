"""Inline requests that arrived together, run as one model call: ``Pipeline.inline`` for many.

A front end that parses several complete requests for the same inline model in one event-loop
wake-up (64 connections: most wake-ups find many) hands them here together. Each is checked on
its own first, exactly as ``Pipeline.inline`` checks it (sample count, deadline and its floor,
the handler's preprocess, the schema), so a bad request is answered with its own error and
never joins the call; the rest are stacked along dimension 0 (as the batcher concatenates,
inferpool.engine.executors.batching), run once, and split back, each request's rows finished
on their own (the handler's postprocess, the NaN check), its deadline checked after the call.
A call costs far less per sample stacked than alone (digits on onnxruntime: 18.6 µs for one
sample, 7.1 a sample at 8). Nothing waits: what is grouped is what the wake-up already holds.

Only for a model whose every input and output has a batch dimension (``Pipeline.stackable``).
If a stacked call fails, or its outputs are not one row a sample, each of its requests runs
again alone, so that no request gets an error that only its neighbours caused; in the second
case the model is not stacked again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferpool.engine.errors import DeadlineExceeded
from inferpool.engine.schema import Array
from inferpool.engine.serving.pipeline import Pipeline, finish_failed, worker_died
from inferpool.engine.serving.requests import Outcome, Prediction, request_id

log = logging.getLogger(__name__)

GROUP_ROWS = 64
"""The most samples one stacked call carries: past it a call's time per sample stops falling
(digits on onnxruntime: 7.1 µs a sample at 8, 5.6 at 32), while its latency keeps growing."""

InlineRequest = tuple[object, float | None, str | None]
"""A request as ``Pipeline.inline`` takes it: its inputs, its deadline (``time.monotonic()``), its id."""


@dataclass(slots=True)
class _Checked:
    """A request that passed its checks: its arrays, and what its answer needs."""

    at: int
    """Its place among the requests given."""
    arrays: dict[str, Array]
    single: bool
    """It was one sample without a batch dimension: so is its answer."""
    rows: int
    context: object
    """What the handler's preprocess gave its postprocess."""
    deadline: float | None
    rid: str
    started: float
    """``time.monotonic()`` when its checks began."""
    validate: float
    """How long its own checks took (a stacked call also waits for its neighbours': batch time)."""


def run_together(pipeline: Pipeline, requests: Sequence[InlineRequest]) -> list[Outcome]:
    """One outcome per request, in order: its Prediction, or the error it is answered with."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    groups: dict[tuple[tuple[int, ...], ...], list[_Checked]] = {}
    for at, request in enumerate(requests):
        checked = _check(pipeline, at, request)
        if isinstance(checked, BaseException):
            outcomes[at] = checked
            continue
        # Per-sample shapes: a text model's sequence buckets stack only with their own kind.
        groups.setdefault(tuple([a.shape[1:] for a in checked.arrays.values()]), []).append(checked)
    for group in groups.values():
        for call in _calls(group):
            for checked, outcome in zip(call, _run(pipeline, call), strict=True):
                outcomes[checked.at] = outcome
    return outcomes  # type: ignore[return-value]  # every place is filled above


def _check(pipeline: Pipeline, at: int, request: InlineRequest) -> _Checked | BaseException:
    """``Pipeline.inline``'s checks before the call, for one request: its error, or it checked."""
    inputs, deadline, rid = request
    started = time.monotonic()
    handler = pipeline.handler
    # Only a handler's preprocess can log here (for the request it works for); the call sets its own.
    token = request_id.set(rid) if handler is not None and rid is not None else None
    try:
        arrays, single, context = pipeline.prepared(inputs, deadline, started)
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 -- this request's answer only
        return exc
    except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: on the event loop it would end the server
        return worker_died(exc)
    finally:
        if token is not None:
            request_id.reset(token)
    rows = next(iter(arrays.values())).shape[0] if arrays else 1
    return _Checked(at, arrays, single, rows, context, deadline, rid or "-", started, time.monotonic() - started)


def _calls(group: list[_Checked]) -> list[list[_Checked]]:
    """A group's requests in calls of at most GROUP_ROWS samples (a larger request runs alone)."""
    calls: list[list[_Checked]] = []
    rows = GROUP_ROWS
    for checked in group:
        if rows + checked.rows > GROUP_ROWS:
            calls.append([])
            rows = 0
        calls[-1].append(checked)
        rows += checked.rows
    return calls


def _run(pipeline: Pipeline, call: list[_Checked]) -> list[Outcome]:
    """One model call for ``call``'s requests, and each one's outcome."""
    rows = sum(checked.rows for checked in call)
    token = request_id.set(call[0].rid if len(call) == 1 else ",".join(checked.rid for checked in call))
    outputs: dict[str, Array] | None = None  # None: the stacked call failed, each runs alone
    try:
        dispatched = time.monotonic()
        if len(call) == 1:
            outputs = pipeline.run(call[0].arrays)  # a model failure is logged and answered as alone
        else:
            stacked = {name: np.concatenate([c.arrays[name] for c in call]) for name in call[0].arrays}
            outputs = pipeline.runtimes.run(stacked)
            if any(out.shape[:1] != (rows,) for out in outputs.values()):
                log.warning(
                    "model %r returned %s for %d stacked samples: its requests no longer share a call",
                    pipeline.name, [out.shape for out in outputs.values()], rows,
                )  # fmt: skip
                pipeline.stackable = False
                outputs = None
        finished = time.monotonic()
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 -- alone, each request gets its own answer
        if len(call) == 1:
            return [exc]
        log.debug("a stacked call of model %r failed (%r): its requests run alone", pipeline.name, exc)
    except BaseException as exc:  # noqa: BLE001 -- SystemExit & co: on the event loop it would end the server
        return [worker_died(exc) for _ in call]
    finally:
        request_id.reset(token)
    if outputs is None:  # outside the handler: their errors are not chained to the stacked call's
        return [outcome for checked in call for outcome in _run(pipeline, [checked])]
    outcomes: list[Outcome] = []
    start = 0
    for checked in call:
        if len(call) == 1:
            own = {n: out[0] for n, out in outputs.items()} if checked.single else outputs
        elif checked.single:  # its row, without its batch dimension: one index, not a slice and an index
            own = {n: out[start] for n, out in outputs.items()}
        else:
            own = {n: out[start : start + checked.rows] for n, out in outputs.items()}
        start += checked.rows
        outcomes.append(_finish(pipeline, checked, own, rows, (dispatched, finished), len(call) > 1))
    return outcomes


def _finish(
    pipeline: Pipeline, checked: _Checked, outputs: dict[str, Array], rows: int, call: tuple[float, float],
    stacked: bool,
) -> Outcome:  # fmt: skip
    """One request's outputs (one sample's without its batch dimension) -> its Prediction, or the
    error only it gets. Its phases as ``Pipeline.inline`` reports them; stacked, the wait for its
    neighbours' checks is batch time."""
    dispatched, finished = call
    if not pipeline.outputs_as_run:
        try:
            outputs = pipeline.checked_outputs(outputs, checked.context)
        except Exception as exc:  # noqa: BLE001 -- this request's answer, not its neighbours'
            return finish_failed(exc, checked.rid)
    if checked.deadline is not None and finished > checked.deadline:
        return DeadlineExceeded(f"the request's deadline passed while model {pipeline.name!r} ran it")
    validate, formed = checked.validate, dispatched - checked.started - checked.validate
    if not stacked:
        validate, formed = dispatched - checked.started, 0.0
    return Prediction(
        outputs, checked.single, rows, 0.0, validate, finished - dispatched, max(formed, 1e-9) if stacked else 0.0,
        dispatched,
    )  # fmt: skip
