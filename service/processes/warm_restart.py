"""A cold start serves as a warm one does: after a load that built its artifacts, the supervisor
starts over from the compile cache it just filled.

Building (the ONNX export, the backend race, torch.export for ``static``) imports onnx,
onnxscript, sympy, networkx, torch._dynamo and kin: ~150 MB of modules that serving never uses
again but that stay in the supervisor's heap, and so in every serving process forked from it
(measured on the digits model: the tree's PSS 389 MiB after a cold start, 240 MiB after a warm
one). A container starts cold unless its cache survives it, so every pod paid that. When the
load wrote compile-cache files and left builder modules imported, the supervisor replaces its own
image (``execve``, same pid, argv and environment) keeping the listening socket: connections
arriving meanwhile wait in its backlog, and the new image's standby answers them. That image
finds every artifact cached, imports no builder and forks lean processes. It never restarts
again (the socket it inherits says so), so a load that cannot be cached costs one load, not a loop.

The restart repeats what the cache does not keep (timings, the accuracy gate, the wide lane's
probe): for the digits model ~0.5 s, for MiniLM ~28 s of a 31 s load. So only a load that took
at most ``RESTART_WITHIN_SECONDS`` restarts; a longer one keeps its builders (logged: a compile
cache kept across starts, on a volume, avoids both).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Collection
from typing import NoReturn

log = logging.getLogger(__name__)
LISTENER_FD = "INFERPOOL_LISTENER_FD"
"""The restarted image's listening socket, inherited across ``execve``."""
BUILDERS = ("onnxscript", "onnx", "sympy", "networkx", "torch._dynamo", "torch.onnx", "torch._inductor")
"""Modules that building imports and serving from the cache does not."""
RESTART_WITHIN_SECONDS = 20.0
"""The longest load worth repeating for the builders' memory (~150 MB): the digits model's cold
load takes 8-13 s on a shared 2-core machine, MiniLM's 31 s (its warm one 28 s)."""


def builders_loaded() -> list[str]:
    return [name for name in BUILDERS if name in sys.modules]


def restart_reason(cached_now: Collection[object], load_seconds: float) -> str | None:
    """Why this start should start again from the cache it filled; None if it should not."""
    builders = builders_loaded()
    if not cached_now or not builders:
        return None
    reason = f"this start built {len(cached_now)} cached artifacts and keeps their builders in memory"
    reason += f" ({', '.join(builders)})"
    if load_seconds > RESTART_WITHIN_SECONDS:
        log.info("%s, ~150 MB: its load took %.0f s, too long to repeat for them "
                 "(a compile cache kept across starts avoids both)", reason, load_seconds)  # fmt: skip
        return None
    return reason


def inherited_listener() -> socket.socket | None:
    """The listening socket an earlier image of this process handed over, if this is a restart."""
    fd = os.environ.pop(LISTENER_FD, None)
    return None if fd is None else socket.socket(fileno=int(fd))


def restart_from_cache(listener: socket.socket) -> NoReturn:
    """Replace this process's image with a fresh start of the same command, handing it ``listener``."""
    listener.set_inheritable(True)
    os.environ[LISTENER_FD] = str(listener.fileno())
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)
