"""ModelHost: loads the configured models off the event loop and hands them to routes once
every one of them is warm.

Under the supervisor (inferpool.service.processes.supervisor) the parent process loads the models once
(``preload``) and every serving process it forks starts them (``start``), so all share one copy
of the weights; readiness then also asks the supervisor's board whether every process is ready.
Models are addressed by name and version: the config's models are version 1, a repository's
(inferpool.service.models.repository) have their folders' numbers, and a name alone means its latest version.
A serving process's set never changes; the supervisor changes it (``replan``) and forks anew.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from inferpool.config import Settings
from inferpool.engine import ServedModel
from inferpool.engine.client import EngineClient
from inferpool.engine.compile_cache import cache_dir
from inferpool.engine.errors import ConfigError, NotReady
from inferpool.engine.plan.pod_load import PodLoad
from inferpool.engine.plan.threads import plan_threads
from inferpool.service.apierror import ApiError
from inferpool.service.models.budget import cpu_shares
from inferpool.service.models.plans import STATIC_VERSION, Key, ModelPlan
from inferpool.service.models.plans import plans as plans  # re-exported: the commands import them from here
from inferpool.service.models.plans import repository_plans as repository_plans
from inferpool.service.models.plans import settings_shares as settings_shares
from inferpool.service.models.plans import sized as sized
from inferpool.service.models.plans import startup_plans as startup_plans
from inferpool.service.processes.process_states import READY, ProcessBoard
from inferpool.service.readiness import Readiness
from inferpool.service.telemetry.logs import model_served

log = logging.getLogger(__name__)


class ModelHost:
    """Owns the ServedModels' lifecycle: loading -> ready -> closed (or failed)."""

    def __init__(self, settings: Settings, on_ready: Callable[[EngineClient], None] | None = None) -> None:
        self.settings = settings
        self.on_ready = on_ready
        self._preloaded: dict[Key, ServedModel] | None = None
        self._plans: dict[Key, ModelPlan] = {}
        self.announce: Callable[[], None] | None = None
        """Called once every model has started (a forked process tells the supervisor)."""
        self.warm: Callable[[], None] | None = None
        """Called in the loader thread once the models serve, before this process says it is
        ready: the app's warm requests (service/http/warmup.py)."""
        self.warming = False
        """The models serve, the warm requests run: not ready yet."""
        self.board: ProcessBoard | None = None
        """Set in a serving process the supervisor forked: the readiness of all of them."""
        self.slot = 0
        self.pod = PodLoad(max(1, settings.workers))
        """Model calls running in every serving process (made before the fork, so all share it)."""
        self.models: dict[str, EngineClient] = {}
        """Each name's latest version."""
        self.versions: dict[str, dict[str, EngineClient]] = {}
        self.generation = 0
        """How many times the supervisor changed the model set: a forked process serves the set
        of the generation it was forked at, and readiness per version compares them."""
        self._plan_of: dict[EngineClient, ModelPlan] = {}
        """Each served model's plan (its version, labels), keyed by the model itself: it holds the
        model, so a key can never be a dropped model's reused id()."""
        self.default: EngineClient | None = None
        self.error: str | None = None
        self.draining = False  # set on SIGTERM: new requests are refused, accepted ones finish
        self.closed = False
        self._loader: threading.Thread | None = None

    def start(self) -> None:
        # Made here, not in __init__: the supervisor makes the host and forks, and a Thread made
        # before a fork and started after it says it is not alive while it runs (CPython 3.11).
        self._loader = threading.Thread(target=self._load, name="inferpool-loader", daemon=True)
        self._loader.start()

    def join(self, board: ProcessBoard, slot: int) -> None:
        """This host serves as process ``slot`` of the supervisor's ``board``."""
        self.board, self.slot = board, slot
        self.pod.claim(slot)

    @property
    def stopping(self) -> bool:
        return self.draining or self.closed or (self.board is not None and self.board.draining)

    def preload(self, freeze: bool = True) -> None:
        """Load, choose and warm every model in this thread without starting any thread of
        theirs (the supervisor forks serving processes after this); raises what loading raised.
        ``freeze=False``: a load only for the compile cache it fills, which nothing forks from."""
        self._preloaded = self._build(startup_plans(self.settings), start=False)
        if freeze:
            _freeze_heap()  # before the fork: pages the collector would otherwise write stay shared

    def cache_dirs(self) -> set[Path]:
        """The compile caches the start-up models use."""
        return {cache_dir(plan.options.compile_cache_dir) for plan in startup_plans(self.settings)}

    def identity(self) -> str:
        """What the start-up loads, as text: the same text means the same models and options."""
        return repr(startup_plans(self.settings))

    def wait_loaded(self, timeout: float | None = None) -> None:
        if self._loader is not None:
            self._loader.join(timeout)

    @property
    def loading(self) -> bool:
        """The models are not serving yet: not started, or starting and warming (the loader runs)."""
        return self._loader is None or self._loader.is_alive()

    @property
    def status(self) -> Readiness:
        if self.error is not None:
            return Readiness.FAILED
        if self.default is None or self.warming:
            return Readiness.LOADING
        if self.stopping:
            return Readiness.STOPPING
        if not all(model.stats().healthy for model in self.all_models()):
            return Readiness.DEGRADED
        # Another serving process is starting or was replaced: the pod is not fully up.
        return Readiness.READY if self.board is None or self.board.all_ready() else Readiness.STARTING

    def serving(self) -> EngineClient:
        """The default model; NotReady (503) while the host is not serving (loading, stopping)."""
        default = self.default
        if default is None or self.stopping:
            raise NotReady(f"model is not ready ({self.status}{': ' + self.error if self.error else ''})")
        return default

    def get(self, name: str | None = None, version: str | None = None) -> EngineClient:
        """A model by name (the default one without) and version (the latest without),
        NotReady (503) while the host is not serving, ApiError 404 for one it does not serve."""
        default = self.serving()
        if name is None:
            model_served.set((default.name, self.version_label(default)))
            return default
        try:
            versions = self.versions[name]
        except KeyError:
            raise ApiError(
                404, f"model {name!r} is not served here; this server serves {sorted(self.models)}", "unknown_model"
            ) from None
        try:
            found = self.models[name] if version is None else versions[version]
        except KeyError:
            raise ApiError(
                404, f"model {name!r} has no version {version!r}; it has {sorted(versions, key=int)}", "unknown_model"
            ) from None
        model_served.set((found.name, self.version_label(found)))  # this request's logs and metrics
        return found

    def version_of(self, model: EngineClient) -> str:
        plan = self._plan_of.get(model)
        return STATIC_VERSION if plan is None else plan.version

    def version_label(self, model: EngineClient) -> str:
        """``model``'s version as metrics and logs label it (ModelPlan.version_label)."""
        plan = self._plan_of.get(model)
        return "" if plan is None else plan.version_label

    def ready(self, model: EngineClient) -> bool:
        """``model`` (a version this process serves) takes requests whichever serving process gets
        them: loaded and warm here, its pool whole, nothing draining, and every serving process
        ready on this one's model set (during a change's rollout processes serve different sets,
        so no version is ready until they all serve the same one)."""
        stats = model.stats()
        if self.stopping or self.default is None or self.warming or not (stats.accepting and stats.healthy):
            return False
        return self.board is None or self.board.settled(self.generation)

    def served(self) -> list[tuple[EngineClient, ModelPlan]]:
        """Each name's latest version with its plan, in the order they were planned."""
        return [(model, self._plan_of[model]) for model in self.models.values()]

    def replan(self, wanted: list[ModelPlan]) -> list[ServedModel]:
        """In the supervisor: make the loaded set ``wanted``, loading (and warming) what is new
        beside what serves; raises what loading raised, with nothing changed. Returns the
        models dropped, for the caller to close before it forks (the serving processes that
        still use them hold their own copy-on-write pages)."""
        assert self._preloaded is not None, "replan is for the supervisor, after preload"
        keep = {key: m for key, m in self._preloaded.items() if self._plans.get(key) in wanted}
        todo = [plan for plan in wanted if _key(plan) not in keep]
        added = self._build(todo, start=False, keep=keep, total=len(wanted))
        for model in keep.values():
            _resplit(model, cpu_shares(self.settings.workers, len(wanted)))
        dropped = [m for key, m in self._preloaded.items() if key not in keep]
        self._preloaded = {_key(plan): keep.get(_key(plan)) or added[_key(plan)] for plan in wanted}
        for key in [key for key in self._plans if key not in self._preloaded]:
            del self._plans[key]
        self.generation += 1
        return dropped  # the caller frees them, and freezes the new heap before it forks

    @property
    def planned(self) -> list[ModelPlan]:
        return list(self._plans.values())

    def close(self) -> None:
        self.closed = True
        for model in self.all_models():
            model.close()

    def all_models(self) -> list[EngineClient]:
        return [model for by in self.versions.values() for model in by.values()]

    def _build(
        self, todo: list[ModelPlan], start: bool, keep: dict[Key, ServedModel] | None = None, total: int = 0
    ) -> dict[Key, ServedModel]:
        """``todo`` loaded beside ``keep``; ``total`` models will serve in all (their pools
        split the CPUs). On failure, what it loaded is closed and nothing else changed."""
        settings = self.settings
        shares = cpu_shares(settings.workers, total or len(todo))
        loaded: dict[Key, ServedModel] = {}
        names = {(m.name, version) for (_, version), m in (keep or {}).items()}
        before = dict(self._plans)
        try:
            for plan in todo:
                model = ServedModel.load(
                    plan.source, plan.options, max_queue=settings.max_queue,
                    shares=shares, name=plan.name, handler=plan.handler, start=start, pod=self.pod,
                    priority_levels=settings.priority_levels,
                )  # fmt: skip
                if _key(plan) in loaded or (model.name, plan.version) in names:
                    model.close()
                    raise ConfigError(f"two models are named {model.name!r}; give one a distinct 'name' in the config")
                loaded[_key(plan)] = model
                names.add((model.name, plan.version))
                self._plans[_key(plan)] = plan
        except BaseException:
            for model in loaded.values():
                model.close()
            self._plans = before
            raise
        return loaded

    def _load(self) -> None:
        try:
            if self._preloaded is None:
                loaded = self._build(startup_plans(self.settings), start=True)
                _freeze_heap()
            else:
                loaded = self._preloaded
                for model in loaded.values():
                    model.start(forked=True)
            self._index(loaded)  # before on_ready, which labels each model's metrics by version
            for model in loaded.values():
                if self.on_ready is not None:
                    self.on_ready(model)
            self.warming = self.warm is not None
            self.default = loaded[next(iter(loaded))]  # published last: routes see complete state
            if self.warm is not None:
                self._warm(self.warm)
            if self.board is not None:
                self.board.mark(self.slot, READY, self.generation)
            if self.announce is not None:
                self.announce()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("loading the models failed")

    def _warm(self, warm: Callable[[], None]) -> None:
        """Warm requests may fail (a model that refuses zeros): the process serves all the same."""
        try:
            warm()
        except Exception:
            log.exception("warm requests failed; the first requests of this process are cold ones")
        finally:
            self.warming = False

    def _index(self, loaded: dict[Key, ServedModel]) -> None:
        """By name and version, and each name's latest version (the highest number)."""
        self._plan_of = {model: self._plans[key] for key, model in loaded.items()}
        for (_, version), model in loaded.items():
            self.versions.setdefault(model.name, {})[version] = model
        self.models = {name: by[max(by, key=int)] for name, by in self.versions.items()}
        log.info(
            "serving %s", ", ".join(f"{name} versions {sorted(by, key=int)}" for name, by in self.versions.items())
        )


def _resplit(model: ServedModel, shares: int) -> None:
    """``model``'s pool sized to its share of the CPUs now that ``shares`` pools split them: a
    pool sized automatically shrinks when models are added and grows when they go. Cheap (runtimes
    dropped, or built on the loaded module and artifact and warmed: no load, no compile), so it is
    done at every change; a pool that cannot grow keeps its size, which stays within the budget."""
    try:
        plan = plan_threads(model.options, shares=shares)
        if plan.runtimes != model.plan.runtimes:
            log.info("model %r: %d runtimes, %d before (%d pools share the CPUs)",
                     model.name, plan.runtimes, model.plan.runtimes, shares)  # fmt: skip
        if plan != model.plan:  # the CPU share alone may change: it is reported in the model's config
            model.resize(plan)
    except Exception:
        log.exception("model %r: could not re-size its pool; it keeps %d runtimes", model.name, model.plan.runtimes)


def _key(plan: ModelPlan) -> Key:
    return (plan.name or plan.source, plan.version)


def _freeze_heap() -> None:
    """Move everything allocated so far (torch, the models, their Python wrappers) out of the
    garbage collector's reach: it is never garbage, yet every full collection walked it all and
    stopped every thread meanwhile (hundreds of ms with MiniLM loaded), which showed up as
    stalls of the event loop, refusals included, under overload. Later collections only see
    objects allocated after this point."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info(
        "froze %d startup objects out of the GC in %.0f ms",
        gc.get_freeze_count(),
        (time.perf_counter() - started) * 1e3,
    )
