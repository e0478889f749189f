"""The supervisor's answers to the repository calls: which model set a call asks for.

A call becomes the complete list of ModelPlans to serve (the config's models, then the
repository's); the supervisor loads what is new, replaces its serving processes and closes
what is gone (inferpool.service.processes.supervisor). Nothing here loads a model: a bad request, a version that
cannot be served or a set over the CPU budget (inferpool.service.models.budget) is answered before anything
changes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from inferpool.config import Settings
from inferpool.engine.errors import ConfigError
from inferpool.service.models.budget import OverBudget
from inferpool.service.models.plans import ModelPlan, fit_budget, plans, repository_plans
from inferpool.service.models.repository import ModelFolder, read_model, scan

log = logging.getLogger(__name__)


class Refused(Exception):
    """A call that changes nothing, with its status and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class RepositoryCalls:
    def __init__(self, settings: Settings, planned: list[ModelPlan]) -> None:
        assert settings.model_repository is not None
        self.settings = settings
        self.root: Path = settings.model_repository
        self.static = plans(settings)
        self.repository = [plan for plan in planned if plan not in self.static]
        """The repository's plans being served."""
        self.failures: dict[str, str] = {}
        """Why the last load of a model failed, for the index (by model name)."""

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: every version on disk, READY or UNAVAILABLE with why."""
        served = {(plan.name, plan.version) for plan in self.repository}
        entries = []
        for name, folder in scan(self.root).items():
            tried = folder.selected()  # what the last load of the model failed on, if it did
            for number, version in folder.versions.items():
                entry: dict[str, Any] = {"name": name, "version": str(number)}
                if (name, str(number)) in served:
                    entry["state"] = "READY"
                else:
                    failure = self.failures.get(name) if number in tried else None
                    entry["state"] = "UNAVAILABLE"
                    entry["reason"] = version.reason or failure or "unloaded"
                if entry["state"] == "READY" or not ready_only:
                    entries.append(entry)
        return entries

    def load(self, name: str, body: dict[str, Any]) -> list[ModelPlan]:
        """The set with ``name`` (re)read from the repository, with the call's config override."""
        folder = self._folder(name, _override(body))
        try:
            fresh = repository_plans(self.settings, {name: folder})
        except ConfigError as exc:
            raise Refused(400, f"failed to load {name!r}: {exc}") from None
        if not fresh:
            raise Refused(400, f"failed to load {name!r}: its version_policy selects none of its versions")
        wanted = self._with(name, fresh)
        try:
            self._fit(wanted)
        except OverBudget as exc:  # a conflict with what serves: unloading another model makes room
            raise Refused(409, f"cannot load {name!r}: {exc}; the models served are unchanged") from None
        return wanted

    def unload(self, name: str) -> list[ModelPlan]:
        if not any(plan.name == name for plan in self.repository):
            raise Refused(400, f"failed to unload {name!r}: it is not loaded from the repository")
        return self._with(name, [])

    def rescan(self) -> list[ModelPlan]:
        """The set the repository holds now (poll mode); a folder that cannot be served, or whose
        change does not fit the CPU budget, keeps what it served (its reason goes to the index)."""
        found: dict[str, list[ModelPlan]] = {}
        for name, folder in scan(self.root).items():
            try:
                found[name] = repository_plans(self.settings, {name: folder})
            except ConfigError as exc:
                self.failures[name] = str(exc)
                found[name] = self._serving(name)
        changed = [name for name in sorted(found) if found[name] != self._serving(name)]
        while True:
            wanted = [*self.static, *(plan for each in found.values() for plan in each)]
            try:
                self._fit(wanted)
                return wanted
            except OverBudget as exc:
                if not changed:  # what serves already: it was admitted when it was loaded
                    return wanted
                name = changed.pop()  # the last in name order waits for room first
                reason = f"not loaded: {exc}"
                if self.failures.get(name) != reason:
                    log.warning("model %r: %s", name, reason)
                self.failures[name] = reason
                found[name] = self._serving(name)

    def served(self, wanted: list[ModelPlan]) -> None:
        """``wanted`` serves now."""
        self.repository = [plan for plan in wanted if plan not in self.static]
        for name in {plan.name for plan in self.repository}:
            self.failures.pop(name or "", None)

    def _fit(self, wanted: list[ModelPlan]) -> None:
        fit_budget(wanted, self.settings.workers, oversubscribe=self.settings.runtime.oversubscribe)

    def _serving(self, name: str) -> list[ModelPlan]:
        return [plan for plan in self.repository if plan.name == name]

    def _folder(self, name: str, override: dict[str, Any] | None) -> ModelFolder:
        path = self.root / name
        if "/" in name or name.startswith(".") or not path.is_dir():
            raise Refused(400, f"failed to load {name!r}: no such model folder in the repository {str(self.root)!r}")
        return read_model(path, override)

    def _with(self, name: str, fresh: list[ModelPlan]) -> list[ModelPlan]:
        return [*self.static, *(plan for plan in self.repository if plan.name != name), *fresh]


def _override(body: dict[str, Any]) -> dict[str, Any] | None:
    """Triton's load body: ``{"parameters": {"config": "<JSON>"}}``; the JSON here holds a
    version config.toml's fields (source, runtime, handler)."""
    config = (body.get("parameters") or {}).get("config")
    if config is None:
        return None
    try:
        parsed = orjson.loads(config) if isinstance(config, str) else config
    except orjson.JSONDecodeError as exc:
        raise Refused(400, f"the load's 'config' parameter is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise Refused(400, "the load's 'config' parameter must be a JSON object (source, runtime, handler)")
    return parsed
