"""The modules that building compiled artifacts imports and serving from the compile cache does
not, and a way to refuse them in this process (service/processes/cold_build.py uses both).

Building (the ONNX export, the backend race, torch.export) imports onnx, onnxscript, sympy,
networkx, torch._dynamo and kin: ~150 MB of modules that serving never runs, but that stay in
the heap of whoever imported them and of every process forked from it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

BUILDERS = ("onnxscript", "onnx", "sympy", "networkx", "torch._dynamo", "torch.onnx", "torch._inductor")


class BuildersNeeded(BaseException):
    """Raised at the import of a builder while they are refused. A BaseException, so that the
    engine's ``except Exception`` (a backend candidate that fails is skipped, a cached choice
    that no longer compiles is timed again) lets it through to whoever refused them."""


def is_builder(name: str) -> bool:
    return any(name == builder or name.startswith(builder + ".") for builder in BUILDERS)


def builders_loaded() -> list[str]:
    return [name for name in BUILDERS if name in sys.modules]


class _RefuseBuilders(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if is_builder(fullname):
            raise BuildersNeeded(fullname)
        return None  # every other module: the usual finders


@contextlib.contextmanager
def builders_refused() -> Iterator[None]:
    """Within: importing a builder not imported yet raises BuildersNeeded (in any thread)."""
    finder = _RefuseBuilders()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
