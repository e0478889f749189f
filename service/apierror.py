"""The service's own request errors (the engine has its own kinds in engine.errors)."""

from __future__ import annotations


class ApiError(Exception):
    """A request problem found by the service itself (not JSON, too large, unknown model);
    ``reason`` is its fixed metrics label."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
