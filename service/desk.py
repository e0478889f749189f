"""The supervisor's answers to the repository calls: which model set a call asks for.

A call becomes the complete list of ModelPlans to serve (the config's models, then the
repository's); the supervisor loads what is new, replaces its serving processes and closes
what is gone (service.supervisor). Nothing here loads or imports torch: a bad request or a
version that cannot be served is answered before anything changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from config import Settings
from engine import ConfigError
from service.host import ModelPlan, plans, repository_plans
from service.repository import ModelFolder, read_model, scan


class Refused(Exception):
    """A call that changes nothing, with its status and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Desk:
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
        return self._with(name, fresh)

    def unload(self, name: str) -> list[ModelPlan]:
        if not any(plan.name == name for plan in self.repository):
            raise Refused(400, f"failed to unload {name!r}: it is not loaded from the repository")
        return self._with(name, [])

    def rescan(self) -> list[ModelPlan]:
        """The set the repository holds now (poll mode); a folder that cannot be served keeps what
        it served (its reason goes to the index)."""
        wanted = list(self.static)
        for name, folder in scan(self.root).items():
            try:
                wanted += repository_plans(self.settings, {name: folder})
            except ConfigError as exc:
                self.failures[name] = str(exc)
                wanted += [plan for plan in self.repository if plan.name == name]
        return wanted

    def served(self, wanted: list[ModelPlan]) -> None:
        """``wanted`` serves now."""
        self.repository = [plan for plan in wanted if plan not in self.static]
        for name in {plan.name for plan in self.repository}:
            self.failures.pop(name or "", None)

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
