"""AOTInductor: the model compiled ahead of time to a C++ library per batch size.

``compile`` finds (or compiles and caches, see inferpool.engine.backends.aoti.compile) one package per
compiled batch size, loads each once (inferpool.engine.backends.aoti.runners: weights once per
package, however many runtimes) and checks each against eager on the example inputs, so that a
corrupt, truncated or mismatched package is a ModelLoadError at load, never a wrong answer.

Shapes are static. A request of n rows runs on the smallest compiled size >= n: its rows are
copied into a zero-padded buffer the runtime owns (the compiled call reads it in place), and
the padding rows' outputs are dropped. More rows than the largest size run in chunks of the
largest (the last chunk routed like any request). A compiled package is never called with a
shape it was not compiled for: a fixed-shape package called with another batch size reads or
writes the wrong number of rows without complaint.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferpool.engine.backends.aoti.compile import Package, ensure_packages
from inferpool.engine.backends.aoti.runners import INTERFACES, Caller, Shared
from inferpool.engine.backends.base import Runtime
from inferpool.engine.backends.parity import Tolerance, eager_outputs, first_mismatch, random_inputs
from inferpool.engine.errors import ConfigError, InvalidInput, ModelLoadError
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.plan.threads import usable_cpus
from inferpool.engine.schema import Array


@dataclass(frozen=True)
class AotiArtifact:
    """Every compiled batch size's loaded package, shared by all runtimes of one model."""

    sizes: tuple[int, ...]
    shared: Mapping[int, Shared]
    packages: Mapping[int, Package]


def _fix(package: Package) -> str:
    return f"delete {package.path} and start again (or run `inferpool compile` again) to rebuild it"


def _load(module: InferenceModule, options: RuntimeOptions, package: Package) -> Shared:
    runners = options.num_runtimes or usable_cpus()
    try:
        return INTERFACES[options.aoti_interface](package.path, package.batch_size, module.schema, runners)
    except Exception as exc:  # zip, ELF, missing symbol, torch loader errors: all mean a bad file
        raise ModelLoadError(f"cannot load AOTInductor package {package.path}: {exc}; {_fix(package)}") from exc


def _check_parity(module: InferenceModule, package: Package, caller: Caller) -> None:
    inputs = random_inputs(module.examples(package.batch_size))
    try:
        for buffer, array in zip(caller.inputs, inputs.values(), strict=True):
            buffer[...] = array
        got = caller()
    except Exception as exc:
        raise ModelLoadError(
            f"AOTInductor package {package.path} fails on inputs for {module.name!r}: {exc}; {_fix(package)}"
        ) from exc
    names = [spec.name for spec in module.schema.outputs]
    wrong = first_mismatch(names, got, eager_outputs(module, inputs), AotiRuntime.tolerance)
    if wrong is not None:
        raise ModelLoadError(
            f"AOTInductor package {package.path} disagrees with the eager model {module.name!r} on output "
            f"{wrong!r} (a package of another model or batch size?); {_fix(package)}"
        )


class AotiRuntime(Runtime):
    """One runtime: its own caller per compiled batch size and its own padded input buffers."""

    shared = ("packages", AotiArtifact)
    tolerance = Tolerance(rtol=1e-3, atol=1e-4)  # Inductor's frozen, pre-packed kernels round differently

    def __init__(self, module: InferenceModule, options: RuntimeOptions, compiled: Any = None) -> None:
        super().__init__(module, options, compiled)
        self._sizes = compiled.sizes
        # The compiled size each request size up to the largest runs at (the common case).
        self._fit = [self._sizes[bisect.bisect_left(self._sizes, rows)] for rows in range(self._sizes[-1] + 1)]
        self._names = tuple(s.name for s in module.schema.inputs)
        self._callers = {size: shared.caller() for size, shared in compiled.shared.items()}
        self._outputs = tuple(s.name for s in module.schema.outputs)

    @classmethod
    def compile(cls, module: InferenceModule, options: RuntimeOptions) -> AotiArtifact:
        if options.aoti_interface not in INTERFACES:
            known = [str(name) for name in INTERFACES]
            raise ConfigError(f"aoti_interface {options.aoti_interface!r} is unknown; use one of {known}")
        packages = {p.batch_size: p for p in ensure_packages(module, options)}
        shared = {size: _load(module, options, package) for size, package in packages.items()}
        for size, package in packages.items():
            _check_parity(module, package, shared[size].caller())
        return AotiArtifact(tuple(sorted(packages)), shared, packages)

    def route(self, rows: int) -> list[tuple[int, int, int]]:
        """(start, stop, compiled size) per call for a request of ``rows`` rows."""
        largest = self._sizes[-1]
        calls, start = [], 0
        while rows - start > largest:
            calls.append((start, start + largest, largest))
            start += largest
        calls.append((start, rows, self._fit[rows - start]))
        return calls

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        arrays = [inputs[name] for name in self._names]
        rows = arrays[0].shape[0]
        if rows < len(self._fit):
            outputs = self._run_at(self._fit[rows], arrays)
        else:
            parts = [self._run_at(size, [a[start:stop] for a in arrays]) for start, stop, size in self.route(rows)]
            outputs = [np.concatenate(chunk) for chunk in zip(*parts, strict=True)]
        self.calls += 1
        return dict(zip(self._outputs, outputs, strict=True))

    def _run_at(self, size: int, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        rows = arrays[0].shape[0]
        caller = self._callers[size]
        for array, buffer in zip(arrays, caller.inputs, strict=True):
            if array.shape[1:] != buffer.shape[1:] or array.dtype != buffer.dtype or array.shape[0] != rows:
                raise InvalidInput(
                    f"input of shape {list(array.shape)} {array.dtype} does not fit the compiled "
                    f"[{size}, {', '.join(map(str, buffer.shape[1:]))}] {buffer.dtype}"
                )
            # Copying into the runtime's buffer (which the compiled call reads in place) costs
            # less than handing the library a new pointer per call (see inferpool.engine.backends.aoti.runners).
            buffer[:rows] = array
            if rows < size:
                buffer[rows:] = 0
        outputs = caller()
        return outputs if rows == size else [o[:rows] for o in outputs]
