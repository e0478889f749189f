"""Backends by name; ``RuntimeOptions.backend`` picks one. Add new ones to the table.

The table holds import strings (as uvicorn's ``config.py`` names its loops and protocols): a
backend's module is imported the first time its name is looked up, so importing the engine or
the config loads no backend and opens none of their libraries (the aoti runner's ``ctypes``
handle on libtorch, onnxruntime, the exporters). Names live here and nowhere else: the
backends' and the aoti backend's interfaces' (``AotiInterface``), so that ``RuntimeOptions`` can
check a name without importing the backend that implements it (whose modules import the options).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferpool.engine.backends.base import Runtime

BACKEND_PATHS = {
    "eager": "inferpool.engine.backends.eager:EagerRuntime",
    "onnxruntime": "inferpool.engine.backends.onnxruntime.runtime:OnnxRuntime",
    "openvino": "inferpool.engine.backends.openvino:OpenVinoRuntime",
    "torchscript": "inferpool.engine.backends.torchscript:TorchScriptRuntime",
    "aoti": "inferpool.engine.backends.aoti:AotiRuntime",
    "static": "inferpool.engine.backends.static:StaticRuntime",
}


class AotiInterface(StrEnum):
    """``RuntimeOptions.aoti_interface``: how the ``aoti`` backend calls a compiled package. The
    backend's loaders (engine/backends/aoti/runners.py) and compile configs
    (engine/backends/aoti/compile.py) are keyed by these members; a member compares and hashes as its string."""

    MINIMAL_ARRAYREF = "minimal_arrayref"
    """The library's C ABI through ctypes on the request's arrays; releases the GIL."""
    LOADER = "loader"
    """PyTorch's own ``AOTIModelPackageLoader``; holds the GIL."""


class BackendTable(MutableMapping[str, "type[Runtime]"]):
    """Backend names to runtime classes, each imported on first use. A class can also be
    registered directly under a new name (a plugin, a test's fake backend)."""

    def __init__(self, paths: Mapping[str, str]) -> None:
        self._paths = dict(paths)
        self._loaded: dict[str, type[Runtime]] = {}

    def __getitem__(self, name: str) -> type[Runtime]:
        found = self._loaded.get(name)
        if found is None:
            module, _, attribute = self._paths[name].partition(":")  # KeyError for an unknown name
            found = self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return found

    def __setitem__(self, name: str, backend: type[Runtime]) -> None:
        self._paths[name] = f"{backend.__module__}:{backend.__qualname__}"
        self._loaded[name] = backend

    def __delitem__(self, name: str) -> None:
        del self._paths[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


BACKENDS = BackendTable(BACKEND_PATHS)
AUTO = "auto"
"""Not a backend: the choice among them at startup (inferpool.engine.backends.autoselect)."""


def backend_names() -> list[str]:
    """What ``RuntimeOptions.backend`` may name: the table's backends, then ``auto``; the config
    (inferpool.config.settings) and the model load (autoselect.resolve_backend) check here."""
    return [*sorted(BACKENDS), AUTO]


__all__ = ["AUTO", "BACKENDS", "BACKEND_PATHS", "AotiInterface", "BackendTable", "backend_names"]
