"""The supervisor: loads the models once, forks the serving processes, keeps them running,
and owns readiness and the drain for all of them.

Why fork after loading: the children start as copies of a parent that already holds the
weights, the compiled artifacts and the measured choices, so every page nobody writes (the
weights above all) stays one physical copy, shared copy-on-write. uvicorn's own ``--workers``
imports the app in each process and loads the model N times. Why not gunicorn's ``preload_app``:
it forks the same way, but readiness across processes, the drain of the listen backlog and the
fork-safe loading (no thread and no OpenMP region in the parent, see ServedModel.start) would
all still be ours to build around it.

Every process serves on the one listening socket the supervisor bound, taking a connection only
while it holds no more than the others (inferpool.service.processes.spread: left to the event loops, the
first to wake took every connection queued at that moment). The ProcessBoard, shared memory made
before the fork, tells each process whether all the others are ready and whether a drain has
begun. On SIGTERM or SIGINT: the board says "draining" (every process's readiness turns 503 at
once), each process drains (processes/drain.py), and what is left in the listen backlog gets a
503 from the standby server before the socket closes (processes/backlog_answers.py). A process
that dies is replaced by a new fork of the same loaded state.

With a model repository, the model set changes here too: the supervisor's ``ModelSwap``
(processes/model_swap.py) loads the new set beside the old, then replaces the serving processes
one at a time; each process asks for a change, and says it is ready, over a socket pair made
before its fork (processes/supervisor_channel.py).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import socket
import time
from collections.abc import Mapping
from functools import partial

import uvicorn

# What each serving process would otherwise import at its start (the websockets protocol that
# ``uvicorn.Config.load()`` picks for ``ws="auto"``, and FastAPI's lifespan below), for the same
# reason as the app's modules further down (~0.3 MiB a process).
import uvicorn.protocols.websockets.auto
from prometheus_client import Counter, multiprocess

from inferpool.config import Settings
from inferpool.engine.errors import EngineError

# Imported here, before the models load and the heap is frozen, not in each serving process after
# its fork: the app's modules (FastAPI, pydantic, the routes, gRPC's messages) are then one shared
# copy instead of one private copy per process (~14 MB each).
from inferpool.service.app import create_app
from inferpool.service.models.host import ModelHost
from inferpool.service.models.repository_calls import RepositoryCalls
from inferpool.service.processes import supervisor_channel
from inferpool.service.processes.backlog_answers import answer_backlog
from inferpool.service.processes.cold_build import load_lean
from inferpool.service.processes.idle_pages import page_out_code
from inferpool.service.processes.model_swap import SIGNALS, ModelSwap
from inferpool.service.processes.parent_death import die_with_parent
from inferpool.service.processes.process_states import DOWN, ProcessBoard
from inferpool.service.processes.retiring_server import RetiringServer
from inferpool.service.processes.spread import ConnectionCounts

with contextlib.suppress(ImportError):  # only FastAPI versions with telemetry (0.16x) have it
    importlib.import_module("fastapi.telemetry._runtime")

log = logging.getLogger(__name__)
STOPS = (signal.SIGTERM, signal.SIGINT)
"""The signals that drain the tree (SIGNALS' others only wake the watch)."""
BACKLOG = 2048
EXIT_GRACE_SECONDS = 5.0  # beyond drain_seconds, before a process that will not exit is killed
BACKLOG_SECONDS = 2.0  # answering what is queued when every process has stopped
CRASH_WINDOW_SECONDS = 10.0  # a process dying sooner than this after its start counts as a crash
MAX_CRASHES = 5  # in a row: then the fault is not transient, and the supervisor exits 1
LISTEN_SECONDS = 0.1  # with a repository: the watch waits this long for a call, then looks at signals


class Supervisor:
    def __init__(self, settings: Settings, uvicorn_options: Mapping[str, object]) -> None:
        self.settings = settings
        self.processes = settings.workers
        self.options = uvicorn_options
        self.board = ProcessBoard(self.processes)
        self.connections = ConnectionCounts(self.processes) if self.processes > 1 else None
        """Open connections per process, so that a few keep-alive clients spread over all of them."""
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, started at)
        self.channels: dict[int, socket.socket] = {}  # pid -> the supervisor's end (supervisor_channel.py)
        self.ready: set[int] = set()  # processes that said their models have started
        self.retired: set[int] = set()  # replaced by a newer process, finishing what they hold
        self.crashes = 0
        self.code_paged_out = False
        """Set once every serving process is ready and the supervisor's loading code is paged
        out (processes/idle_pages.py); a new fork clears it."""
        self.swap: ModelSwap | None = None
        """The model changes, with a repository: they replace the processes through ``spawn``."""
        # Written to the shared metrics directory: every serving process's /metrics sums it in.
        self.replaced = Counter("inferpool_process_replacements", "Serving processes restarted after dying.")

    def run(self) -> int:
        began = time.monotonic()
        try:
            listener = _listen(self.settings.host, self.settings.port)
        except OSError as exc:  # the port is taken, the address is not this machine's, ...
            log.error("cannot listen on %s:%d: %s", self.settings.host, self.settings.port, exc)
            return 2
        try:
            held = _hold(self.settings.host, self.settings.grpc_port) if self.settings.grpc_port else None
        except OSError as exc:
            log.error("cannot listen for gRPC on %s:%d: %s", self.settings.host, self.settings.grpc_port, exc)
            return 2
        log.info("listening on http://%s:%d", self.settings.host, listener.getsockname()[1])
        log.info("effective config: %s", self.settings.model_dump_json())
        host = ModelHost(self.settings)
        # Ctrl-C while loading stops the process at once, as SIGTERM does: nothing to drain yet,
        # and a KeyboardInterrupt raised inside an exporter or a probe thread can be swallowed.
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if inherited as ignored
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        # processes/cold_build.py: a cold start builds in a child, and this process loads warm.
        load, build = partial(_preload, host), partial(_preload, host, freeze=False)
        code = load_lean(load, build, host.cache_dirs(), host.identity(), listener)
        if code != 0:
            return code
        if self.settings.model_repository is not None:
            calls = RepositoryCalls(self.settings, host.planned)
            self.swap = ModelSwap(self, calls, began + self.settings.repository_poll_seconds)
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        for slot in range(self.processes):
            self.spawn(slot, listener, host)
        log.info("%d serving processes started from one loaded copy of the models", self.processes)
        code = self._watch(listener, host)
        if held is not None:
            held.close()
        log.info("supervisor exiting with status %d", code)
        return code

    def spawn(self, slot: int, listener: socket.socket, host: ModelHost, replacing: bool = False) -> int:
        """A serving process in ``slot``; ``replacing`` one that serves until this one is ready
        (the slot stays as it is on the board meanwhile: the pod stays ready)."""
        if not replacing:
            self.board.mark(slot, DOWN)
        self.code_paged_out = False
        serving_elsewhere = replacing or self.board.any_ready()
        ours, theirs = supervisor_channel.pair()
        pid = os.fork()
        if pid == 0:  # the serving process: never returns into the supervisor's stack
            code = 1
            try:
                for sock in [ours, *self.channels.values()]:
                    sock.close()
                code = self._serve(slot, listener, host, theirs, serving_elsewhere)
            except BaseException:
                log.exception("serving process %d failed", slot)
            finally:
                logging.shutdown()
                os._exit(code)
        theirs.close()
        self.channels[pid] = ours
        self.children[pid] = (slot, time.monotonic())
        return pid

    def _serve(
        self, slot: int, listener: socket.socket, host: ModelHost, channel: socket.socket, serving_elsewhere: bool
    ) -> int:
        # Its own process group: a terminal's Ctrl-C reaches only the supervisor, which then
        # drains every process once (a second signal would skip the drain).
        os.setpgid(0, 0)
        die_with_parent()
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        host.join(self.board, slot)
        calls = supervisor_channel.Control(channel, self.settings.model_control_mode)
        host.announce = calls.announce
        app = create_app(self.settings, host)
        app.state.control = calls if self.settings.model_repository is not None else None
        config = uvicorn.Config(app, **self.options)  # type: ignore[arg-type]
        drain = self.settings.drain_seconds
        server = RetiringServer(config, host, app.state.activity, drain, calls, self.connections, serving_elsewhere)
        server.run(sockets=[listener])
        return 0

    def _watch(self, listener: socket.socket, host: ModelHost) -> int:
        while True:
            if self.swap is None:
                received = signal.sigtimedwait(SIGNALS, 1.0)
            else:  # the processes' calls too, at the cost of a signal waiting up to LISTEN_SECONDS
                self.swap.listen(LISTEN_SECONDS)
                received = signal.sigtimedwait(SIGNALS, 0)
            if self.reap(listener, host) == "give up":
                self._stop(listener)
                return 1
            self._page_out_once_ready()
            # Only the stop signals: a tracer attached to this process (py-spy) has made
            # sigtimedwait return a siginfo whose number is garbage, which must not stop the tree.
            if received is not None and received.si_signo in STOPS:
                log.info("%s received: draining every serving process", signal.Signals(received.si_signo).name)
                return self._stop(listener)
            if self.swap is None:
                continue
            self.swap.answer(listener, host)
            if self.swap.stop_requested:
                log.info("stop requested during a model change: draining every serving process")
                return self._stop(listener)

    def _page_out_once_ready(self) -> None:
        """After the processes are ready, not at the fork: a page the supervisor alone maps would
        be reclaimed before a starting process's first touch, and read back from disk for it."""
        if self.code_paged_out or not self.board.all_ready():
            return
        self.code_paged_out = True
        asked = page_out_code()
        log.debug("paged out the supervisor's code pages (%d MiB of mappings asked)", asked >> 20)

    def reap(self, listener: socket.socket, host: ModelHost) -> str:
        """Collect exited processes and replace each, unless they keep crashing."""
        for pid, (slot, started), code in self._exited():
            if pid in self.retired:  # replaced on purpose, and done
                self.retired.discard(pid)
                log.info("replaced serving process %d (pid %d) exited with status %d", slot, pid, code)
                continue
            self.crashes = self.crashes + 1 if time.monotonic() - started < CRASH_WINDOW_SECONDS else 0
            if self.crashes >= MAX_CRASHES:
                log.error("serving processes keep dying (%d in a row, last status %d): giving up", self.crashes, code)
                return "give up"
            self.replaced.inc()
            log.warning("serving process %d (pid %d) exited with status %d: starting a replacement", slot, pid, code)
            self.spawn(slot, listener, host)
        return "ok"

    def _stop(self, listener: socket.socket) -> int:
        self.board.start_drain()
        for pid in self.children:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_seconds + EXIT_GRACE_SECONDS
        codes: list[int] = []
        while self.children and (left := deadline - time.monotonic()) > 0:
            received = signal.sigtimedwait(SIGNALS, min(left, 0.5))
            if received is not None and received.si_signo in STOPS:
                log.warning("second %s: stopping without waiting", signal.Signals(received.si_signo).name)
                for pid in self.children:
                    _signal(pid, signal.SIGTERM)  # a second signal skips the drain
            codes += [code for _, _, code in self._exited()]
        for pid in list(self.children):
            log.error("serving process pid %d did not exit in time: killing it", pid)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self.children.pop(pid)
            codes.append(1)
        answered = answer_backlog(listener, BACKLOG_SECONDS)
        if answered:
            log.info("answered %d queued connections with 503 before closing", answered)
        return 0 if all(code == 0 for code in codes) else 1

    def _exited(self) -> list[tuple[int, tuple[int, float], int]]:
        """(pid, (slot, started at), exit code) of each serving process that has exited, its
        slot marked down and its live metrics dropped."""
        exited = []
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            slot, started = self.children.pop(pid)
            if pid not in self.retired:  # a retired process's slot is its replacement's now
                self.board.mark(slot, DOWN)
            with contextlib.suppress(KeyError):
                self.channels.pop(pid).close()
            self.ready.discard(pid)
            multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
            exited.append((pid, (slot, started), os.waitstatus_to_exitcode(status)))
        return exited


def _preload(host: ModelHost, freeze: bool = True) -> int:
    """``host.preload()``: 0, or the start's exit status with the reason logged."""
    try:
        host.preload(freeze)
    except EngineError as exc:  # the model's or the config's fault: one line, as config errors are
        log.error("loading the models failed: %s", exc)
        log.debug("loading the models failed", exc_info=True)
        return 2
    except Exception:
        log.exception("loading the models failed")
        return 1
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The one listening socket every serving process accepts from (one shared accept queue).

    SO_REUSEPORT lets the drain's plug join it at the end (service/processes/closing.py); the probe
    first, without it, so that a second server on the same port still fails to start instead
    of joining the group and sharing its traffic."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        probe.listen(1)
        port = probe.getsockname()[1]  # port 0: the same free port for the real listener
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((host, port))
    listener.listen(BACKLOG)
    listener.set_inheritable(True)
    return listener


def _hold(host: str, port: int) -> socket.socket:
    """``port`` bound for the serving processes' gRPC servers, not listened on (so it gets no
    connections): they bind it again with SO_REUSEPORT, while anyone else's bind fails -- a
    second server started on the same port stops at once instead of sharing its traffic."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Listening with SO_REUSEADDR fails while any socket holds the port (another server's
    # gRPC, or its hold) but not over connections of an earlier run left in TIME_WAIT.
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        probe.listen(1)
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # and not SO_REUSEADDR: see above
    held.bind((host, port))
    return held


def _signal(pid: int, signo: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone: reaped next
        os.kill(pid, signo)
