"""TorchScript through PyTorch's Static Runtime, for legacy TorchScript archives.

``compile`` freezes a ScriptModule (a ``.ts`` archive as loaded; a factory's ``nn.Module``
scripted, or traced on its example inputs when it cannot be scripted) and builds one
``torch.StaticModule`` from it with ``torch._C._jit_to_static_module``, shared by every
runtime. TorchScript is deprecated upstream, so each compile warns (FutureWarning and a log
line) with what to use instead.

One shared StaticModule behind a lock, not one per runtime: the Python binding's
``__call__`` (torch/csrc/jit/runtime/static/init.cpp) runs ``StaticModule::operator()``,
which runs the module's single cached ``StaticRuntime`` (``StaticModule::runtime()`` in
impl.cpp creates it lazily and returns it to every caller) and never releases the GIL. So
calls cannot overlap anyway, and more StaticModules would only add graphs and buffers. The
GIL alone happens to make concurrent calls safe; the lock says so explicitly and keeps it
true on a free-threaded build, where two calls would share one runtime's buffers.

The binding takes no options (StaticModuleOptions defaults: out variants and memory planning
on, outputs not managed, so each call returns fresh tensors); the ``static`` backend's options
do not apply here. No ``torch.jit.optimize_for_inference`` before it: that crashed on the
digits CNN here.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.jit._trace import TracerWarning

from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.parity import Tolerance, eager_outputs, first_mismatch, random_inputs
from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.module import InferenceModule, flatten_outputs
from inferpool.engine.models.torchscript_archive import TorchScriptArchive, quiet_jit
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.schema import Array

log = logging.getLogger(__name__)

DEPRECATION = (
    "backend 'torchscript' runs TorchScript, which PyTorch has deprecated and will remove; re-export the "
    "model with torch.export (serve the .pt2 or a factory) and use backend 'onnxruntime' or 'auto'"
)


@dataclass(frozen=True)
class StaticArtifact:
    """What every TorchScript runtime shares: the StaticModule, the frozen ScriptModule it was
    built from (kept alive with it), how that was obtained, and the lock around calls."""

    static: Any  # torch.StaticModule (untyped C++ binding)
    frozen: torch.jit.ScriptModule
    origin: str  # "archive", "scripted" or "traced"
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)


def _script(module: InferenceModule) -> tuple[torch.jit.ScriptModule, str, list[str]]:
    """The module as TorchScript, and any tracer warnings (a trace that may have baked in a shape)."""
    if isinstance(module.module, TorchScriptArchive):
        return module.module.script, "archive", []
    try:
        return torch.jit.script(module.module), "scripted", []
    except Exception as exc:  # noqa: BLE001 -- most modules with Python-only code; tracing handles them
        log.debug("model %r cannot be scripted (%s); tracing it", module.name, exc)
    examples = tuple(torch.from_numpy(module.examples(2)[s.name]) for s in module.schema.inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TracerWarning)
        traced = torch.jit.trace(module.module, examples, check_trace=False)  # type: ignore[no-untyped-call]
    distinct = dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, TracerWarning))
    return traced, "traced", list(distinct)


def _check_parity(module: InferenceModule, static: Any, origin: str, tracer_warnings: list[str]) -> None:
    """Compare with the eager module at two batch sizes, so that a trace specialised to one
    shape fails at load, not in traffic."""
    names = [spec.name for spec in module.schema.outputs]
    for size in (1, 3):
        batch = random_inputs(module.examples(size))
        got = [t.detach().numpy() for t in flatten_outputs(static(*(torch.from_numpy(a) for a in batch.values())))]
        wrong = first_mismatch(names, got, eager_outputs(module, batch), TorchScriptRuntime.tolerance)
        if wrong is not None:
            hint = f" (the tracer warned: {'; '.join(tracer_warnings)})" if tracer_warnings else ""
            raise ModelLoadError(
                f"the {origin} TorchScript of {module.name!r} disagrees with the eager model on output "
                f"{wrong!r} at batch {size}{hint}; use backend 'eager'"
            )


class TorchScriptRuntime(Runtime):
    """Calls the shared StaticModule built by :meth:`compile`."""

    shared = ("module", StaticArtifact)
    # Static Runtime runs the same ATen kernels as eager, but may pick fused or out= variants.
    tolerance = Tolerance(rtol=1e-4, atol=1e-6)

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._names = tuple(s.name for s in module.schema.inputs)
        self._static, self._lock = compiled.static, compiled.lock

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> StaticArtifact:
        warnings.warn(DEPRECATION, FutureWarning, stacklevel=2)
        log.warning("model %r: %s", module.name, DEPRECATION)
        try:
            with quiet_jit():
                scripted, origin, tracer_warnings = _script(module)
                frozen = torch.jit.freeze(scripted.eval())
            static = torch._C._jit_to_static_module(frozen._c)
        except Exception as exc:
            raise ModelLoadError(
                f"cannot build a TorchScript Static Runtime module for {module.name!r}: {exc}; use backend 'eager'"
            ) from exc
        _check_parity(module, static, origin, tracer_warnings)
        if tracer_warnings:  # parity held at two batch sizes, but say what the trace assumed
            log.warning("model %r was traced for TorchScript; the tracer warned: %s", module.name, tracer_warnings)
        return StaticArtifact(static, frozen, origin)

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        args = [torch.from_numpy(inputs[name]) for name in self._names]
        with self._lock:
            result = self._static(*args)
        self.calls += 1
        return self.module.outputs_by_name(result)
