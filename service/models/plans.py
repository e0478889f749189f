"""Which models to serve, as plans: the config's models, a repository's versions, and the
serving process count and CPU budget they are sized by. Plans are data: nothing here loads a
model (inferpool.service.models.host does)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from inferpool.config import Settings
from inferpool.engine import ConfigError, RuntimeOptions
from inferpool.engine.models.sources import allowed_backends
from inferpool.engine.plan.threads import serving_processes, usable_cpus
from inferpool.service.models.budget import cpu_shares, pool_plans
from inferpool.service.models.repository import ModelFolder, scan

STATIC_VERSION = "1"


@dataclass(frozen=True)
class ModelPlan:
    source: str
    name: str | None
    options: RuntimeOptions
    handler: str | None = None
    version: str = STATIC_VERSION
    """A repository model's version folder; "1" for the config's models, which have one."""
    from_repository: bool = False

    @property
    def described(self) -> str:
        """The model as messages name it."""
        if self.from_repository:
            return f"model {self.name!r} version {self.version}"
        return f"model {self.name or self.source!r}"

    @property
    def version_label(self) -> str:
        """The version as metrics and logs label it: "" for the config's models, so that their
        series stay the ones dashboards already query (Prometheus drops an empty label)."""
        return self.version if self.from_repository else ""


Key = tuple[str, str]  # (name as planned, else the source; version): unique while names are


def plans(settings: Settings) -> list[ModelPlan]:
    """The default model first, then the listed ones (each with its own or the shared options)."""
    extra = [ModelPlan(m.source, m.name, m.runtime or settings.runtime, m.handler) for m in settings.models]
    return [ModelPlan(settings.model, None, settings.runtime, settings.handler), *extra]


def repository_plans(settings: Settings, folders: dict[str, ModelFolder]) -> list[ModelPlan]:
    """What the repository's version policies select, each version a plan of its own; ConfigError
    naming the version when one that is selected cannot be served."""
    wanted = []
    for folder in folders.values():
        if folder.reason is not None:
            raise ConfigError(f"model {folder.name!r} in the repository: {folder.reason}")
        for number in folder.selected():
            version = folder.versions[number]
            if version.reason is not None:
                raise ConfigError(f"model {folder.name!r} version {number}: {version.reason}")
            runtime = version.runtime or _default_runtime(version.source, settings.runtime)
            wanted.append(ModelPlan(version.source, folder.name, runtime, version.handler, str(number), True))
    return wanted


def _default_runtime(source: str, runtime: RuntimeOptions) -> RuntimeOptions:
    """The server's runtime options for a version without its own; a source only one backend
    serves (an ONNX file) gets that backend, whichever the server's default is."""
    allowed = allowed_backends(source)
    if allowed is None or runtime.backend in allowed:
        return runtime
    return dataclasses.replace(runtime, backend=allowed[0])


def startup_plans(settings: Settings) -> list[ModelPlan]:
    """The config's models, then the repository's (when there is one)."""
    if settings.model_repository is None:
        return plans(settings)
    return [*plans(settings), *repository_plans(settings, scan(settings.model_repository))]


def settings_shares(settings: Settings) -> int:
    """How many pools split the CPUs when ``settings`` serve: processes x the models started with
    (the config's and the repository's), as the server's host splits them."""
    return cpu_shares(settings.workers, len(startup_plans(settings)))


def sized(settings: Settings, cpus: int | None = None) -> Settings:
    """``workers = 0`` replaced by the process count the CPU budget holds (inferpool.engine.plan.threads);
    an explicit count above the budget is refused unless ``runtime.oversubscribe``. With a
    model repository, the count holds the repository's models too, and the set started with
    must fit the budget (inferpool.service.models.budget), as every set loaded later must."""
    cpus = usable_cpus() if cpus is None else cpus
    if settings.workers > cpus and not settings.runtime.oversubscribe:
        raise ConfigError(
            f"workers={settings.workers} serving processes, but this process may use {cpus} CPUs (affinity and "
            "cgroup quota): lower workers (0 sizes it automatically), or set runtime.oversubscribe=true"
        )
    started = startup_plans(settings)
    workers = settings.workers or serving_processes([model.options for model in started], cpus)
    if settings.model_repository is not None:
        fit_budget(started, workers, cpus, settings.runtime.oversubscribe)
    return settings if settings.workers else settings.model_copy(update={"workers": workers})


def fit_budget(wanted: list[ModelPlan], processes: int, cpus: int | None = None, oversubscribe: bool = False) -> None:
    """OverBudget (a ConfigError) saying what to lower when ``wanted`` does not fit the CPUs."""
    cpus = usable_cpus() if cpus is None else cpus
    pools = [(plan.described, plan.options) for plan in wanted]
    pool_plans(pools, max(1, processes), cpus, oversubscribe)  # workers = 0, not sized yet, is one process
