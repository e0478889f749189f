"""The supervisor's half of a model change: load beside what serves, then replace the
serving processes one at a time, then close what is gone.

A load, unload or rescan becomes the full list of models to serve (inferpool.service.models.repository_calls). The
supervisor loads and warms what is new in its own process while the serving processes go on
serving the old set (fork-safe, as at start: no thread, one intra-op thread); a model that
fails to load, check or warm leaves everything as it was and answers the call with why. Then
each serving process in turn is replaced by a fork of the updated supervisor, which shares its
weights: the new one starts and says it is ready, and only then the old one is retired
(inferpool.service.processes.retiring_server: it stops taking connections and finishes what it holds). The process that
asked goes last and gets its answer once every process serves the new set; the models no
process serves any more are closed first (so that no new process inherits them), and their
memory goes back to the system as the old processes exit.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from inferpool.engine.errors import EngineError
from inferpool.service.models.host import ModelHost
from inferpool.service.models.plans import ModelPlan
from inferpool.service.models.repository_calls import Refused, RepositoryCalls
from inferpool.service.processes import supervisor_channel

if TYPE_CHECKING:
    from inferpool.service.processes.supervisor import Supervisor

log = logging.getLogger(__name__)
SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
START_SECONDS = 120.0  # a process forked with a new model set must be ready within this


class ModelSwap:
    """The supervisor's model changes, when it serves a repository: it holds one, and its watch
    hands it what the processes sent (``listen``) and lets it answer (``answer``); a change forks
    and reaps through the supervisor, whose processes it replaces."""

    def __init__(self, supervisor: Supervisor, repository: RepositoryCalls, next_scan: float) -> None:
        self.supervisor = supervisor
        self.settings = supervisor.settings
        self.repository = repository
        self.pending: list[tuple[int, supervisor_channel.Message]] = []  # calls not answered yet, in order
        self.stop_requested = False  # a signal came while a change was under way
        self.next_scan = next_scan  # poll mode's first scan (time.monotonic)
        self.failed_scan: list[tuple[ModelPlan, tuple[int, int]]] | None = None  # retried once it changes

    def listen(self, timeout: float) -> None:
        """Collect what the processes sent within ``timeout``: readiness, and calls to answer."""
        by_socket = {sock: pid for pid, sock in self.supervisor.channels.items()}
        readable, _, _ = select.select(list(by_socket), [], [], timeout)
        for sock in readable:
            message = supervisor_channel.receive(sock)
            if message is None:
                continue  # the process exited: reaped, and its channel closed, with it
            if message.get("op") == "ready":
                self.supervisor.ready.add(by_socket[sock])
            else:
                self.pending.append((by_socket[sock], message))

    def answer(self, listener: socket.socket, host: ModelHost) -> None:
        """The calls that came, in order, then (poll mode) the repository's changes, unless a
        stop was asked meanwhile."""
        while self.pending and not self.stop_requested:
            self._answer_call(*self.pending.pop(0), listener, host)
        if self.settings.model_control_mode == "poll" and not self.stop_requested:
            self._poll(listener, host)

    def _answer_call(
        self, pid: int, message: supervisor_channel.Message, listener: socket.socket, host: ModelHost
    ) -> None:
        op, name = message.get("op"), str(message.get("name", ""))
        try:
            if op == "index":
                self._reply(pid, 200, self.repository.index(bool(message.get("ready"))))
            elif op == "load":
                self._apply(self.repository.load(name, message.get("body") or {}), listener, host, pid, name)
            elif op == "unload":
                self._apply(self.repository.unload(name), listener, host, pid, name)
            else:
                self._reply(pid, 400, {"error": f"unknown repository call {op!r}"})
        except Refused as exc:
            log.warning("model change refused (%d): %s", exc.status, exc)
            self._reply(pid, exc.status, {"error": str(exc)})

    def _poll(self, listener: socket.socket, host: ModelHost) -> None:
        """Poll mode: what the repository holds now, served unless it failed as it is."""
        if time.monotonic() < self.next_scan:
            return
        wanted = self.repository.rescan()
        # Each source's size and time too: an archive caught half-written is retried once complete.
        stamped = [(plan, _stamp(plan.source)) for plan in wanted]
        if stamped != self.failed_scan:
            changed = sorted({p.name or "" for p in wanted if p not in host.planned})
            ok = self._apply(wanted, listener, host, None, ", ".join(changed))
            self.failed_scan = None if ok else stamped
        self.next_scan = time.monotonic() + self.settings.repository_poll_seconds

    def _apply(
        self, wanted: list[ModelPlan], listener: socket.socket, host: ModelHost, asker: int | None, name: str = ""
    ) -> bool:
        """Serve ``wanted``; answers ``asker``; False if it could not be loaded."""
        if _same(wanted, host.planned):
            self._reply(asker, 200, {})
            return True
        log.info("model change: serving %s", ", ".join(f"{p.name or 'default'}:{p.version}" for p in wanted))
        reason = None
        try:
            dropped = host.replan(wanted)
        except EngineError as exc:  # the model's fault or the config's: the old set keeps serving
            reason = str(exc) or type(exc).__name__
            log.error("model change failed, nothing changed: %s", reason)
        except Exception as exc:  # raised by the model's own code (its factory, its forward)
            reason = f"{type(exc).__name__}: {exc}"
            log.exception("model change failed, nothing changed")
        if reason is not None:
            self.repository.failures[name] = reason
            self._reply(asker, 400, {"error": f"failed to load {name!r}: {reason}; the models served are unchanged"})
            _release()
            return False
        self.repository.served(wanted)
        # Freed before the forks: a process forked while this one still held them would keep
        # their pages mapped (its own copy of a heap nobody in it frees) for its whole life.
        # The old processes still serving them hold their own copy-on-write mappings.
        while dropped:
            dropped.pop().close()  # and no name left bound to it in this frame
        _release()
        failed = self._rollout(listener, host, asker)
        self._reply(asker, 500 if failed else 200, {"error": failed} if failed else {})
        return True

    def _rollout(self, listener: socket.socket, host: ModelHost, asker: int | None) -> str | None:
        """Every serving process replaced, the asker last; what went wrong, or None."""
        processes = self.supervisor
        old = sorted((pid for pid in processes.children if pid not in processes.retired), key=lambda pid: pid == asker)
        for pid in old:
            if pid not in processes.children:
                continue  # it died meanwhile: its replacement was forked from the new set already
            fresh = processes.spawn(processes.children[pid][0], listener, host, replacing=True)
            started = partial(self._started, fresh)
            if not self._until(started, START_SECONDS, listener, host):
                return "stopped, or a new serving process did not start in time: some processes serve the old models"
            if fresh not in processes.ready:
                return "a new serving process exited while starting: some processes serve the old models (see the log)"
            processes.retired.add(pid)
            supervisor_channel.send(processes.channels[pid], {"op": "retire"})
        # Not waiting for the retired to exit: one may hold a call of its own (answered after
        # this change), and it would only exit after drain_seconds.
        return None

    def _started(self, pid: int) -> bool:
        return pid in self.supervisor.ready or pid not in self.supervisor.children

    def _until(self, done: Callable[[], bool], seconds: float, listener: socket.socket, host: ModelHost) -> bool:
        """Wait for ``done`` while collecting messages and exits; False on time-out or a stop signal."""
        deadline = time.monotonic() + seconds
        while not done():
            if self.stop_requested or time.monotonic() > deadline:
                return False
            self.listen(0.02)
            self._answer_indexes()
            received = signal.sigtimedwait(SIGNALS, 0)
            if received is not None and received.si_signo != signal.SIGCHLD:
                self.stop_requested = True
            self.supervisor.reap(listener, host)
        return True

    def _answer_indexes(self) -> None:
        """Index calls that came meanwhile, answered at once: they change nothing, and the
        process that asked may be one being retired, which waits for its calls to end."""
        for call in [call for call in self.pending if call[1].get("op") == "index"]:
            self.pending.remove(call)
            self._reply(call[0], 200, self.repository.index(bool(call[1].get("ready"))))

    def _reply(self, pid: int | None, status: int, body: Any) -> None:
        if pid is not None and pid in self.supervisor.channels:
            supervisor_channel.send(self.supervisor.channels[pid], {"status": status, "body": body})


def _same(plans: list[ModelPlan], others: list[ModelPlan]) -> bool:
    """The same set (ModelPlans hold pydantic options: comparable, not hashable)."""
    return len(plans) == len(others) and all(plan in others for plan in plans)


def _stamp(source: str) -> tuple[int, int]:
    """(size, mtime) of an archive source; (0, 0) for a factory."""
    try:
        found = os.stat(source)
    except OSError:
        return (0, 0)
    return (found.st_size, found.st_mtime_ns)


def _release() -> None:
    """Free what the closed models held: they were frozen out of the collector with the rest
    of the start-up heap, and glibc keeps freed memory for reuse unless asked to return it."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        log.debug("malloc_trim is unavailable: freed model memory stays with this process for reuse")
