"""ModelHost: loads the configured models off the event loop and hands them to routes once
every one of them is warm."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from config import Settings
from engine import EngineClient, NotReady, RuntimeOptions, ServedModel
from service.apierror import ApiError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPlan:
    source: str
    name: str | None
    options: RuntimeOptions
    handler: str | None = None


def plans(settings: Settings) -> list[ModelPlan]:
    """The default model first, then the listed ones (each with its own or the shared options)."""
    extra = [ModelPlan(m.source, m.name, m.runtime or settings.runtime, m.handler) for m in settings.models]
    return [ModelPlan(settings.model, None, settings.runtime, settings.handler), *extra]


class ModelHost:
    """Owns the ServedModels' lifecycle: loading -> ready -> closed (or failed)."""

    def __init__(self, settings: Settings, on_ready: Callable[[EngineClient], None] | None = None) -> None:
        self.settings = settings
        self._on_ready = on_ready
        self.models: dict[str, EngineClient] = {}
        self.default: EngineClient | None = None
        self.error: str | None = None
        self.draining = False  # set on SIGTERM: new requests are refused, accepted ones finish
        self.closed = False
        self._loader = threading.Thread(target=self._load, name="inferpool-loader", daemon=True)

    def start(self) -> None:
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> None:
        self._loader.join(timeout)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.default is None:
            return "loading"
        if self.draining or self.closed:
            return "stopping"
        # A worker thread died and its replacement is not up, or the pool lost a runtime.
        return "ready" if all(model.stats().healthy for model in self.models.values()) else "degraded"

    def get(self, name: str | None = None) -> EngineClient:
        """A model by name (the default one without), NotReady (503) while the host is not
        serving, ApiError 404 for a name it does not serve."""
        default = self.default
        if default is None or self.draining or self.closed:
            raise NotReady(f"model is not ready ({self.status}{': ' + self.error if self.error else ''})")
        if name is None:
            return default
        try:
            return self.models[name]
        except KeyError:
            raise ApiError(
                404, f"model {name!r} is not served here; this server serves {sorted(self.models)}", "unknown_model"
            ) from None

    def close(self) -> None:
        self.closed = True
        for model in self.models.values():
            model.close()

    def _load(self) -> None:
        settings = self.settings
        todo = plans(settings)
        try:
            loaded: dict[str, EngineClient] = {}
            for plan in todo:
                # Every pool gets an equal share of the CPUs: workers x models shares.
                model = ServedModel.load(
                    plan.source, plan.options, max_queue=settings.max_queue,
                    shares=settings.workers * len(todo), name=plan.name, handler=plan.handler,
                )  # fmt: skip
                if model.name in loaded:
                    model.close()
                    raise ValueError(f"two models are named {model.name!r}; give one a distinct 'name' in the config")
                loaded[model.name] = model
                if self._on_ready is not None:
                    self._on_ready(model)
            _freeze_heap()
            self.models = loaded
            self.default = loaded[next(iter(loaded))]  # published last: routes see complete state
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("loading the models failed")


def _freeze_heap() -> None:
    """Move everything allocated so far (torch, the models, their Python wrappers) out of the
    garbage collector's reach: it is never garbage, yet every full collection walked it all and
    stopped every thread meanwhile -- 430-480 ms per collection with MiniLM loaded (386k
    objects), which showed up as 300+ ms stalls of the event loop, refusals included, under
    overload. Later collections only see objects allocated after this point."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info(
        "froze %d startup objects out of the GC in %.0f ms",
        gc.get_freeze_count(),
        (time.perf_counter() - started) * 1e3,
    )
