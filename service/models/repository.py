"""The model repository on disk: one folder per model, numbered version folders in each.

```
repository/
  digits/
    config.toml        optional: version_policy = "all" | {latest = 2} | {specific = [1, 3]}
    1/model.pt2        a torch.export archive (or .ts / .torchscript, or an ONNX model.onnx) ...
    2/config.toml      ... or a config.toml: source = "package.module:function" (or "file.pt2"),
                       [runtime] options and handler, checked as the main config's are
```

Reading it needs no torch: ``scan`` says which versions exist and what is wrong with each;
``wanted`` turns a scan into the ModelPlans the version policies select (the latest version
only, as Triton, unless a policy says otherwise). Loading them is the host's business.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from inferpool.config.settings import check_backend, check_handler, check_source
from inferpool.engine import RuntimeOptions
from inferpool.engine.errors import ConfigError
from inferpool.engine.models.source_kinds import ARCHIVE_SUFFIXES, is_path
from inferpool.engine.models.sources import serving_options

CONFIG = "config.toml"


class Latest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latest: int = Field(gt=0, description="Serve the N highest versions.")


class Specific(BaseModel):
    model_config = ConfigDict(extra="forbid")
    specific: list[int] = Field(min_length=1, description="Serve exactly these versions.")


class ModelConfig(BaseModel):
    """A model folder's config.toml."""

    model_config = ConfigDict(extra="forbid")
    version_policy: Literal["all"] | Latest | Specific = Field(
        default_factory=lambda: Latest(latest=1), description="Which versions to serve; default: the latest."
    )


class VersionConfig(BaseModel):
    """A version folder's config.toml, or a load call's config override."""

    model_config = ConfigDict(extra="forbid")
    source: str | None = Field(None, description="A factory 'package.module:function' or an archive path.")
    runtime: Annotated[RuntimeOptions, AfterValidator(check_backend)] | None = None
    handler: Annotated[str, AfterValidator(check_handler)] | None = None


@dataclass(frozen=True)
class Version:
    """One version folder: what it serves, or why it cannot (``reason``)."""

    number: int
    source: str = ""
    runtime: RuntimeOptions | None = None
    handler: str | None = None
    reason: str | None = None


@dataclass
class ModelFolder:
    name: str
    versions: dict[int, Version] = field(default_factory=dict)
    policy: Literal["all"] | Latest | Specific = field(default_factory=lambda: Latest(latest=1))
    reason: str | None = None  # the folder's own config.toml is wrong: none of it is served

    def selected(self) -> list[int]:
        numbers = sorted(self.versions)
        if self.reason is not None:
            return []
        if self.policy == "all":
            return numbers
        if isinstance(self.policy, Latest):
            return numbers[-self.policy.latest :]
        return [n for n in numbers if n in self.policy.specific]


def scan(root: Path) -> dict[str, ModelFolder]:
    """Every model folder under ``root`` (hidden ones and plain files skipped) by name."""
    folders: dict[str, ModelFolder] = {}
    for path in sorted(root.iterdir()):
        if path.is_dir() and not path.name.startswith("."):
            folders[path.name] = read_model(path)
    return folders


def read_model(path: Path, override: dict[str, Any] | None = None) -> ModelFolder:
    """One model folder; ``override`` (a load call's config) replaces each version's config.toml."""
    folder = ModelFolder(path.name)
    try:
        folder.policy = ModelConfig.model_validate(_toml(path / CONFIG)).version_policy
    except (ValueError, OSError) as exc:
        folder.reason = f"{path / CONFIG}: {_short(exc)}"
    for child in sorted(path.iterdir()):
        if child.is_dir() and child.name.isdigit() and int(child.name) > 0:  # Triton skips other names too
            folder.versions[int(child.name)] = read_version(child, override)
    return folder


def read_version(path: Path, override: dict[str, Any] | None = None) -> Version:
    number = int(path.name)
    try:
        config = VersionConfig.model_validate(override if override is not None else _toml(path / CONFIG))
        source = config.source or _archive(path)
        if config.source and is_path(config.source):
            source = str(path / config.source)  # relative to the version folder
        check_source(source)
        if config.runtime is not None:
            serving_options(source, config.runtime)  # an ONNX file with another backend named
    except (ValueError, OSError, ConfigError) as exc:
        return Version(number, reason=_short(exc))
    return Version(number, source, config.runtime, config.handler)


def _archive(path: Path) -> str:
    found = [p for p in sorted(path.iterdir()) if p.suffix in ARCHIVE_SUFFIXES and p.is_file()]
    if not found and (path / "config.json").is_file():
        return str(path)  # the version folder is a Hugging Face model folder
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise ValueError(
            f"version folder {str(path)!r} holds {what} model archives ({', '.join(sorted(ARCHIVE_SUFFIXES))}): "
            f"put exactly one there (or a Hugging Face model folder's files), or name the source in its {CONFIG} "
            "(source = 'package.module:function')"
        )
    return str(found[0])


def _toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open("rb") as file:
        return tomllib.load(file)


def _short(exc: Exception) -> str:
    """A validation error's messages on one line, without pydantic's links."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
    return str(exc)
