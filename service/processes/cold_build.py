"""A cold start builds its compile cache in a forked child, and the supervisor then loads from
that cache as a warm start does: the serving processes never inherit the builders.

The builders (service/processes/builders.py: onnx, onnxscript, sympy, torch._dynamo, ~150 MB)
would otherwise stay in the supervisor's heap, and so in every serving process forked from it
(the digits tree: ~410 MB PSS after a cold start in one process, ~260 MB with the child).
So the supervisor first loads with their import refused. A warm start (every artifact cached:
exports, auto's choice, the precision verdict, the gate's figures) never imports them and is
done. A cold start stops at its first builder import, which costs what came before it (reading
the model and its key: ~0.1 s for digits); the supervisor then forks a builder child, which
loads without the refusal, fills the cache and exits, and the supervisor loads again, now warm.
This replaced a restart of the whole interpreter from the filled cache (``execve``, ~1.5 s).

The fork is as safe as the serving processes' are: loading runs with one intra-op thread (no
OpenMP region has run) and starts no thread, and the standby's thread is stopped around the
fork. The child writes to the same log handlers, and its failure is the start's: it logs it as
the supervisor would have, and the supervisor exits with its status.

A start the child cannot help, or that would pay too much for it, loads in this process as
before, builders and all:
- its models are heavy (``HEAVY_MODEL_MB``): decided at the first builder import, by how much
  the load had grown the process by then, so nothing of the load is lost;
- its cache directory cannot be written (nothing the child built would reach the supervisor);
- its warm load compiles with builders anyway (backend ``static`` or ``aoti``: torch.export at
  every start). The first such start pays the child for nothing, then notes it in the cache
  (``*.builds-every-start``) so that later starts skip the child.
Builders the model's own code imports (transformers' BertModel imports sympy and torch._dynamo)
are the model's: they are neither refused nor avoidable (builders.py, ``COMPILERS``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from inferpool.service.processes.backlog_answers import Standby
from inferpool.service.processes.builders import BuildersNeeded, watching_builders
from inferpool.service.processes.parent_death import die_with_parent
from inferpool.service.readiness import Readiness

log = logging.getLogger(__name__)
Load = Callable[[], int]
"""Loads the models in this process: 0, or the exit status of a failed start (already logged)."""
EVERY_START_SUFFIX = ".builds-every-start"
HEAVY_MODEL_MB = 64
"""A load whose peak memory grew by more than this before its first build (reading the model,
its weights above all) builds in this process, keeping the builders: the builder child costs a warm load more,
about as long as reading the model again (ResNet-50: +135 MB, a warm load of seconds; MiniLM:
+237 MB, ~25 s), and the ~150 MB of builders are then less than the model. digits grows by ~13 MB."""


def load_lean(load: Load, build: Load, caches: Collection[Path], identity: str, listener: socket.socket) -> int:
    """``load()``, leaving no builder module imported here when the compile cache can hold what
    it builds (``build()``, in a child, fills it); the standby answers on ``listener`` meanwhile.
    ``identity`` names what is loaded (the models and their options), for the note that its warm
    load compiles with builders anyway."""
    marker = _every_start_marker(caches, identity)
    # The supervisor starts none before; a test process may hold some that the fork never meets.
    earlier = set(threading.enumerate())
    standby = Standby(listener, Readiness.LOADING)
    try:
        if marker is None or marker.exists():
            return load()
        try:
            with watching_builders(refuse=True, allow_over_mb=HEAVY_MODEL_MB) as watch:
                code = load()
            if code == 0 and watch.heavy:
                log.info("the models grew this process by over %d MB before their first build: built in "
                         "this process, keeping the builders (%s); a builder child would cost one more "
                         "load of them", HEAVY_MODEL_MB, ", ".join(watch.compiled))  # fmt: skip
            return code
        except BuildersNeeded as needed:
            log.info("the compile cache lacks this start's artifacts (%s would be imported): "
                     "building them in a child process", needed)  # fmt: skip
        standby.stop()  # joined: no thread of ours may exist at the fork
        if threads := [t for t in threading.enumerate() if t not in earlier]:  # a child could hang on their locks
            log.warning("threads %s outlived the refused load: building in this process instead", threads)
            standby = Standby(listener, Readiness.LOADING)
            return load()
        code = build_in_child(build)
        standby = Standby(listener, Readiness.LOADING)
        if code != 0:
            return code
        with watching_builders(refuse=False) as watch:
            code = load()
        if code == 0 and watch.compiled:
            _note_every_start(marker, watch.compiled)
        return code
    finally:
        standby.stop()


def build_in_child(build: Load) -> int:
    """``build()`` in a forked child, for the compile cache it fills; the child's exit status."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the builder: never returns into the supervisor's stack
        code = 1
        try:
            die_with_parent(signal.SIGKILL)  # a supervisor stopped while it builds takes it along
            code = build()
        except BaseException:
            log.exception("loading the models failed")
        finally:
            logging.shutdown()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        log.error("building the models' artifacts failed: the builder process was killed by %s",
                  signal.Signals(-code).name)  # fmt: skip
        return 1
    return code


def _every_start_marker(caches: Collection[Path], identity: str) -> Path | None:
    """Where a note that ``identity``'s warm load imports builders goes; None when the cache
    cannot be written (then the child is no use)."""
    writable = [directory for directory in sorted(caches) if _writable(directory)]
    if len(writable) != len(caches) or not writable:
        return None
    key = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return writable[0] / f"start-{key}{EVERY_START_SUFFIX}"


def _writable(directory: Path) -> bool:
    """``directory``, or the nearest of its parents that exists, can be written by us."""
    existing = next((path for path in (directory, *directory.parents) if path.exists()), None)
    return existing is not None and existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)


def _note_every_start(marker: Path, kept: list[str]) -> None:
    log.info("the warm load compiles with builders anyway (%s): later starts load in this process, "
             "without a builder child (delete %s to try again)", ", ".join(kept), marker)  # fmt: skip
    try:  # its presence is the note: a half-written one says the same
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("\n".join(kept) + "\n")
    except OSError as exc:
        log.info("could not write %s (%s): the next start tries the builder child again", marker, exc)
