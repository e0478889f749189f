"""A process the supervisor forks ends when the supervisor does, however it ends."""

from __future__ import annotations

import ctypes
import logging
import signal

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


def die_with_parent(signo: int = signal.SIGTERM) -> None:
    """This process gets ``signo`` when its parent dies (a supervisor killed outright: its serving
    processes get SIGTERM and drain)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signo)
    except (OSError, AttributeError):
        log.debug("prctl(PR_SET_PDEATHSIG) is unavailable: this process outlives a killed supervisor")
