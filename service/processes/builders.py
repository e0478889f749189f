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


COMPILERS = "inferpool.engine.backends"
"""Where the engine compiles: a builder imported with one of its modules on the stack is for an
artifact. One imported otherwise is the model's own (transformers' BertModel imports sympy and
torch._dynamo through torch.distributed): no cache saves that, so it is neither refused nor
counted."""


def builder_of(name: str) -> str | None:
    """The builder module ``name`` is, or is part of; None for any other module."""
    return next((b for b in BUILDERS if name == b or name.startswith(b + ".")), None)


def builders_loaded() -> list[str]:
    return [name for name in BUILDERS if name in sys.modules]


def _compiling() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(COMPILERS):
            return True
        frame = frame.f_back  # type: ignore[assignment]  # None at the bottom of the stack
    return False


class BuilderImports(importlib.abc.MetaPathFinder):
    """Sees every first import of a builder for the engine's compilers: refuses it
    (BuildersNeeded) while ``refuse``, and notes it in ``compiled``.

    ``allow_over_mb``: once this process's peak resident memory has grown by more than that since
    the watch began, the model is heavy, and a builder is imported instead of refused (``heavy``
    says so): the load carries on here, nothing of it wasted."""

    def __init__(self, refuse: bool, allow_over_mb: float = float("inf")) -> None:
        self.refuse = refuse
        self.allow_over_mb = allow_over_mb
        self.peak_before_mb = peak_rss_mb()
        self.heavy = False
        self.compiled: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        builder = builder_of(fullname)
        if builder is None or not _compiling():
            return None  # the usual finders import it
        if self.refuse and peak_rss_mb() - self.peak_before_mb > self.allow_over_mb:
            self.refuse, self.heavy = False, True
        if self.refuse:
            raise BuildersNeeded(fullname)
        if builder not in self.compiled:
            self.compiled.append(builder)
        return None


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM), 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            return next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")), 0.0)
    except OSError:
        return 0.0


@contextlib.contextmanager
def watching_builders(refuse: bool, allow_over_mb: float = float("inf")) -> Iterator[BuilderImports]:
    """Within: the engine's compilers importing a builder not imported yet (in any thread)."""
    finder = BuilderImports(refuse, allow_over_mb)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
