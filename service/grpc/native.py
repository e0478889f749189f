"""The gRPC front end on pygrpc-native's low-level server (HTTP/2 and gRPC framing in Rust, on
its own tokio threads, outside the GIL), serving the servicer's methods unchanged.

Per wake-up, one thread takes a batch of calls from the native server (raw request bytes, the
caller's metadata and deadline) and hands the whole batch to the event loop in one
``call_soon_threadsafe``; each call is decoded with upb (the generated message's
``FromString``), run as a task through the same wrapper grpcio's server runs
(``Servicer.methods``: key check, door, metrics, error boundary) and answered with one call
into the native server. The standard health service (Check, and Watch as a server stream) is
answered here too, so grpcio's server is not started at all.

Differences from grpcio's server, each kept to what a client can observe:

- The native server has no message size limit of its own: a message over ``max_message_bytes``
  is refused RESOURCE_EXHAUSTED, with grpcio's words, once it has arrived whole, before it is
  decoded.
- It can only close all its connections at once (GOAWAY, then calls still running are cut), not
  stop taking calls while those run. A replaced process (``retire``) therefore keeps answering
  and closes at the first moment no call is running here, ``grace`` seconds at the latest; on
  a stop (after the drain, which waited for every call) new calls are refused UNAVAILABLE while
  the last ones finish.

The native server starts its tokio runtime when it is constructed: that happens in ``start``,
in the serving process, after the supervisor's fork (tests/e2e/service/test_grpc_native.py).

Its tokio threads and the receiving thread run under ``SCHED_BATCH``: a call or an answer
waking one of them does not preempt the event loop in the middle of a batch, so they take what
piled up once the loop is idle, not one switch per call. On a core shared with the loop that
was +29 % calls/s and 16 % less CPU a call at 8 callers, and no change at one
(docs/BENCHMARKS.md, "Seventeenth session").
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from pygrpc_native import EVENT_CANCEL, NativeGrpcFront

from inferpool.service.grpc.servicer import SERVICE, Servicer
from inferpool.service.grpc.status import Aborted
from inferpool.service.grpc.wakeups import threads_batch_scheduled

if TYPE_CHECKING:  # the host loads models (torch); this only reads its readiness
    from inferpool.service.models.host import ModelHost

log = logging.getLogger(__name__)
BATCH = 256
"""Most calls taken from the native server per wake-up."""
IO_THREADS = 1
"""tokio threads per serving process: the machine's cores are the serving processes' already."""
DEADLINE_SLACK = 0.05
"""Seconds a call whose deadline passed may still run, for the engine to report the miss."""
HEALTH = "/grpc.health.v1.Health/"
HEALTH_POLL_SECONDS = 0.25
SERVICES = ("", SERVICE)  # the whole server, and the v2 service by name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
Metadata = Sequence[tuple[str, str | bytes]]
INTERNAL = "internal server error; the server log has the details"
UNDECODABLE = "Exception deserializing request!"  # grpcio's words


class Context:
    """What the servicer asks of a call's context (grpc.aio's names), for a native call."""

    __slots__ = ("deadline", "metadata", "trailing")

    def __init__(self, metadata: Metadata, remaining: float | None) -> None:
        self.metadata = metadata
        self.deadline = None if remaining is None else time.monotonic() + remaining
        self.trailing: Metadata = ()

    def invocation_metadata(self) -> Metadata:
        return self.metadata

    def set_trailing_metadata(self, metadata: Metadata) -> None:
        self.trailing = metadata

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


class NativeFrontEnd:
    def __init__(self, servicer: Servicer, host: ModelHost, bind: str, max_message_bytes: int) -> None:
        self.servicer = servicer
        self.host = host
        self.bind = bind
        self.max_message_bytes = max_message_bytes
        served = servicer.methods()
        self._paths = [f"/{SERVICE}/{name}" for name in served] + [HEALTH + "Check", HEALTH + "Watch"]
        self._served = list(served.items())
        self._infer = list(served).index("ModelInfer") if "ModelInfer" in served else -1
        self._front: NativeGrpcFront | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._receiver: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._refusing = False  # stopping: new calls are refused UNAVAILABLE
        self._retiring = False  # replaced: close once no call runs here
        self._watchers: set[int] = set()
        self._deadlines: dict[int, float] = {}

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        streaming = {HEALTH + "Watch"}
        with threads_batch_scheduled():  # the tokio threads, and the one handing calls over
            try:  # constructing it binds the port and starts its tokio threads: in this process
                front = NativeGrpcFront(
                    self.bind,
                    [(path, path in streaming) for path in self._paths],
                    io_threads=IO_THREADS,
                    call_details=True,
                    reuse_port=True,  # beside the supervisor's hold and the other serving processes
                )
            except OSError as exc:
                raise RuntimeError(f"cannot listen for gRPC on {self.bind}: {exc}") from exc
            front.start()
            self._front = front
            self._receiver = threading.Thread(
                target=self._receive, args=(front,), name="grpc-native-calls", daemon=True
            )
            self._receiver.start()
        log.info("gRPC (v2 inference and health, native server) listening on %s", self.bind)

    def _receive(self, front: NativeGrpcFront) -> None:
        loop = self._loop
        assert loop is not None
        while (events := front.recv_batch_details(BATCH)) is not None:
            try:
                loop.call_soon_threadsafe(self._on_events, events)
            except RuntimeError:  # the loop closed under a stop that never came
                front.close()
                return

    def _on_events(self, events: list[Any]) -> None:
        front = self._front
        if front is None:
            return
        create_task = asyncio.get_running_loop().create_task
        for kind, call_id, method_id, payload, _, details in events:
            if kind == EVENT_CANCEL:  # the caller went away or its deadline passed
                running = self._tasks.get(call_id)
                if running is None:
                    continue
                deadline = self._deadlines.get(call_id)
                if deadline is not None and time.monotonic() >= deadline - DEADLINE_SLACK:
                    # The engine stops waiting at the same deadline, and counts the miss as
                    # with grpcio (which lets it); cancelled only if it has not by then.
                    asyncio.get_running_loop().call_later(DEADLINE_SLACK, running.cancel)
                else:
                    running.cancel()
            elif self._refusing:
                front.fail(call_id, grpc.StatusCode.UNAVAILABLE.value[0], "the server is shutting down; retry")
            elif len(payload) > self.max_message_bytes:  # grpcio's code and words for the same refusal
                front.fail(
                    call_id,
                    grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                    f"Received message larger than max ({len(payload)} vs. {self.max_message_bytes})",
                )
            else:
                metadata, _, remaining = details
                if method_id < len(self._served):
                    context = Context(metadata, remaining)
                    request = None
                    if method_id == self._infer:
                        try:
                            # In a context of its own: what its call sets (its request id, its model's
                            # labels) must reach neither the calls after it in the batch nor their tasks.
                            request = contextvars.Context().run(self._infer_now, front, call_id, payload, context)
                        except Exception:  # a bug here must not strand the calls after it in the batch
                            log.exception("answering a gRPC ModelInfer in its batch failed")
                            front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], INTERNAL)
                            continue
                        if request is None:  # answered
                            continue
                    if context.deadline is not None:
                        self._deadlines[call_id] = context.deadline
                    call = self._call(front, call_id, method_id, payload, context, request)
                else:
                    call = self._health(front, call_id, method_id - len(self._served), payload)
                task = self._tasks[call_id] = create_task(call)
                # Not the coroutine's own finally: a call and its cancel in one batch cancel the
                # task before its first step, and its finally never runs.
                task.add_done_callback(functools.partial(self._ended, call_id))

    def _infer_now(self, front: NativeGrpcFront, call_id: int, payload: bytes, context: Context) -> Any:
        """A ModelInfer answered now, in the batch (no task), when its model runs inline
        (``Servicer.infer_now``); else its decoded request, for the task's way."""
        _, served = self._served[self._infer]
        try:
            request = served.request.FromString(payload)
        except DecodeError:  # as grpcio answers a request it cannot deserialize
            front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], UNDECODABLE)
            return None
        try:
            response = self.servicer.infer_now(request, context)
        except Aborted as aborted:
            status = aborted.status
            front.fail(call_id, status.code.value[0], status.details, trailing_metadata=status.trailing_metadata)
            return None
        except Exception:  # infer_now answers every error: this is a bug, answered as one
            log.exception("unhandled error in gRPC ModelInfer")
            front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], INTERNAL)
            return None
        if response is None:
            return request
        front.respond(call_id, response.SerializeToString(), trailing_metadata=context.trailing)
        return None

    async def _call(
        self, front: NativeGrpcFront, call_id: int, method_id: int, payload: bytes, context: Context,
        request: Any = None,
    ) -> None:  # fmt: skip
        """``request`` is the call's, when it is decoded already."""
        name, served = self._served[method_id]
        try:
            if request is None:
                try:
                    request = served.request.FromString(payload)
                except DecodeError:  # as grpcio answers a request it cannot deserialize
                    front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], UNDECODABLE)
                    return
            response = await served.method(request, context)
            front.respond(call_id, response.SerializeToString(), trailing_metadata=context.trailing)
        except Aborted as aborted:
            status = aborted.status
            front.fail(call_id, status.code.value[0], status.details, trailing_metadata=status.trailing_metadata)
        except asyncio.CancelledError:  # the native server already told the caller
            pass
        except Exception:  # the wrapper answers every error: this is a bug, answered as one
            log.exception("unhandled error in gRPC %s", name)
            front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], INTERNAL)

    def _ended(self, call_id: int, _: object) -> None:
        """A call's task is over (its done-callback): forgotten, and a retiring front closes
        once the last one is."""
        self._tasks.pop(call_id, None)
        self._deadlines.pop(call_id, None)
        if self._retiring and not self._tasks:
            self._close()

    async def _health(self, front: NativeGrpcFront, call_id: int, which: int, payload: bytes) -> None:
        """grpc.health.v1: Check from the host's readiness at the time of the call, as
        /health/ready; Watch sends it, then each change (polled), until the caller leaves."""
        try:
            service = health_pb2.HealthCheckRequest.FromString(payload).service
            if which == 0:
                if service not in SERVICES:
                    front.fail(call_id, grpc.StatusCode.NOT_FOUND.value[0], f"no service {service!r} here")
                else:
                    front.respond(call_id, health_pb2.HealthCheckResponse(status=self._status()).SerializeToString())
                return
            sent = None
            self._watchers.add(call_id)
            while True:
                status = self._status() if service in SERVICES else SERVICE_UNKNOWN
                if status != sent:
                    if not front.stream_send(
                        call_id, health_pb2.HealthCheckResponse(status=status).SerializeToString()
                    ):
                        return
                    sent = status
                await asyncio.sleep(HEALTH_POLL_SECONDS)
        except asyncio.CancelledError:
            if self._refusing and which == 1:  # stopping: watchers learn it, as grpcio's health service says
                front.stream_send(call_id, health_pb2.HealthCheckResponse(status=NOT_SERVING).SerializeToString())
                front.stream_end(call_id)
        except Exception:
            log.exception("gRPC health check failed")
            front.fail(call_id, grpc.StatusCode.INTERNAL.value[0], INTERNAL)
        finally:
            self._watchers.discard(call_id)

    def _status(self) -> int:
        return SERVING if self.host.status.ready and not self._refusing else NOT_SERVING

    def retire(self, grace: float) -> None:
        """This process is replaced by a newer one: close (GOAWAY: the callers reconnect, to the
        new processes) as soon as no call runs here, or after ``grace`` seconds."""
        if self._front is None or self._retiring:
            return
        log.info("gRPC: replaced by a newer serving process, closing once no call runs here")
        self._retiring = True
        if not self._tasks:
            # After this call's answer (the wrapper calls this before the answer goes out).
            asyncio.get_running_loop().call_soon(self._close)
        else:
            asyncio.get_running_loop().call_later(grace, self._close)

    def _close(self) -> None:
        front, self._front = self._front, None
        if front is None:
            return
        front.close()
        for running in list(self._tasks.values()):
            running.cancel()

    async def stop(self, grace: float) -> None:
        """Refuse new calls, give those running ``grace`` seconds, then close."""
        self._refusing = True
        watchers = [task for call_id, task in self._tasks.items() if call_id in self._watchers]
        for task in watchers:  # they say NOT_SERVING and end
            task.cancel()
        running = [task for call_id, task in self._tasks.items() if call_id not in self._watchers]
        if running:
            await asyncio.wait(running, timeout=grace)
        if watchers:
            await asyncio.wait(watchers, timeout=grace)
        self._close()
        if self._receiver is not None:  # recv_batch returns None once the front is closed
            await asyncio.to_thread(self._receiver.join, 5)
