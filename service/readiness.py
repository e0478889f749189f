"""The server's readiness, as one typed state: what the health routes, gRPC's health and v2
readiness report, and what a standby answers from."""

from __future__ import annotations

from enum import StrEnum


class Readiness(StrEnum):
    """A ``str`` too: the health routes' JSON says the value, as it always did."""

    LOADING = "loading"
    STARTING = "starting"
    """Loaded here; another serving process is not up yet (or was replaced)."""
    READY = "ready"
    DEGRADED = "degraded"
    """A worker thread died and its replacement is not up, or the pool lost a runtime."""
    STOPPING = "stopping"
    FAILED = "failed"

    @property
    def live(self) -> bool:
        """The process can serve at all (a failed load needs a restart)."""
        return self is not Readiness.FAILED

    @property
    def ready(self) -> bool:
        return self is Readiness.READY
