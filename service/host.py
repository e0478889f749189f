"""ModelHost: loads the configured models off the event loop and hands them to routes once
every one of them is warm.

Under the supervisor (service.supervisor) the parent process loads the models once
(``preload``) and every serving process it forks starts them (``start``), so all share one copy
of the weights; readiness then also asks the supervisor's board whether every process is ready.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from config import Settings
from engine import ConfigError, EngineClient, NotReady, RuntimeOptions, ServedModel
from engine.threads import serving_processes, usable_cpus
from service.apierror import ApiError
from service.board import READY, ProcessBoard

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


def sized(settings: Settings, cpus: int | None = None) -> Settings:
    """``workers = 0`` replaced by the process count the CPU budget holds (engine.threads);
    an explicit count above the budget is refused unless ``runtime.oversubscribe``."""
    cpus = usable_cpus() if cpus is None else cpus
    if settings.workers > cpus and not settings.runtime.oversubscribe:
        raise ConfigError(
            f"workers={settings.workers} serving processes, but this process may use {cpus} CPUs (affinity and "
            "cgroup quota): lower workers (0 sizes it automatically), or set runtime.oversubscribe=true"
        )
    if settings.workers:
        return settings
    workers = serving_processes([model.options for model in plans(settings)], cpus)
    return settings.model_copy(update={"workers": workers})


class ModelHost:
    """Owns the ServedModels' lifecycle: loading -> ready -> closed (or failed)."""

    def __init__(self, settings: Settings, on_ready: Callable[[EngineClient], None] | None = None) -> None:
        self.settings = settings
        self.on_ready = on_ready
        self._preloaded: dict[str, ServedModel] | None = None
        self.board: ProcessBoard | None = None
        """Set in a serving process the supervisor forked: the readiness of all of them."""
        self.slot = 0
        self.models: dict[str, EngineClient] = {}
        self.default: EngineClient | None = None
        self.error: str | None = None
        self.draining = False  # set on SIGTERM: new requests are refused, accepted ones finish
        self.closed = False
        self._loader = threading.Thread(target=self._load, name="inferpool-loader", daemon=True)

    def start(self) -> None:
        self._loader.start()

    def join(self, board: ProcessBoard, slot: int) -> None:
        """This host serves as process ``slot`` of the supervisor's ``board``."""
        self.board, self.slot = board, slot

    @property
    def stopping(self) -> bool:
        return self.draining or self.closed or (self.board is not None and self.board.draining)

    def preload(self) -> None:
        """Load, choose and warm every model in this thread without starting any thread of
        theirs (the supervisor forks serving processes after this); raises what loading raised."""
        self._preloaded = self._build(start=False)
        _freeze_heap()  # before the fork: pages the collector would otherwise write stay shared

    def wait_loaded(self, timeout: float | None = None) -> None:
        self._loader.join(timeout)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        if self.default is None:
            return "loading"
        if self.stopping:
            return "stopping"
        # A worker thread died and its replacement is not up, or the pool lost a runtime.
        if not all(model.stats().healthy for model in self.models.values()):
            return "degraded"
        # Another serving process is starting or was replaced: the pod is not fully up.
        return "ready" if self.board is None or self.board.all_ready() else "starting"

    def get(self, name: str | None = None) -> EngineClient:
        """A model by name (the default one without), NotReady (503) while the host is not
        serving, ApiError 404 for a name it does not serve."""
        default = self.default
        if default is None or self.stopping:
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

    def _build(self, start: bool) -> dict[str, ServedModel]:
        settings = self.settings
        todo = plans(settings)
        loaded: dict[str, ServedModel] = {}
        for plan in todo:
            # Every pool gets an equal share of the CPUs: processes x models shares.
            model = ServedModel.load(
                plan.source, plan.options, max_queue=settings.max_queue,
                shares=settings.cpu_shares, name=plan.name, handler=plan.handler, start=start,
            )  # fmt: skip
            if model.name in loaded:
                model.close()
                raise ConfigError(f"two models are named {model.name!r}; give one a distinct 'name' in the config")
            loaded[model.name] = model
        return loaded

    def _load(self) -> None:
        try:
            if self._preloaded is None:
                loaded = self._build(start=True)
                _freeze_heap()
            else:
                loaded = self._preloaded
                for model in loaded.values():
                    model.start(forked=True)
            for model in loaded.values():
                if self.on_ready is not None:
                    self.on_ready(model)
            self.models = dict(loaded)
            self.default = loaded[next(iter(loaded))]  # published last: routes see complete state
            if self.board is not None:
                self.board.mark(self.slot, READY)
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
