"""ModelHost: loads the model off the event loop and hands it to routes once it is warm."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from config import Settings
from engine import NotReady, ServedModel

log = logging.getLogger(__name__)


class ModelHost:
    """Owns the ServedModel's lifecycle: loading -> ready -> closed (or failed)."""

    def __init__(self, settings: Settings, on_ready: Callable[[ServedModel], None] | None = None) -> None:
        self.settings = settings
        self._on_ready = on_ready
        self.model: ServedModel | None = None
        self.error: str | None = None
        self._loader = threading.Thread(target=self._load, name="inferpool-loader", daemon=True)

    def start(self) -> None:
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> None:
        self._loader.join(timeout)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.model is None:
            return "loading"
        return "ready" if self.model.accepting else "stopping"

    def get(self) -> ServedModel:
        """The model, or NotReady (answered 503 with Retry-After) while it is not serving."""
        model = self.model
        if model is None or not model.accepting:
            raise NotReady(f"model is not ready ({self.status}{': ' + self.error if self.error else ''})")
        return model

    def close(self) -> None:
        if self.model is not None:
            self.model.close()

    def _load(self) -> None:
        try:
            settings = self.settings
            model = ServedModel.load(
                settings.model, settings.runtime, max_queue=settings.max_queue, processes=settings.workers
            )
            if self._on_ready is not None:
                self._on_ready(model)
            self.model = model  # published last: routes see a model only once it is complete
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("loading model %r failed", self.settings.model)
