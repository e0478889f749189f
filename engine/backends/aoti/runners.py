"""Loading one AOTInductor package once, and the per-runtime callers that run it.

Two interfaces, picked by ``RuntimeOptions.aoti_interface`` from ``INTERFACES``:

- ``minimal_arrayref``: the package's ``.so`` opened with ctypes (inferpool.engine.backends.aoti.abi).
  PyTorch's container runner loads the weights once; every runtime creates its own model
  instance (own activations) over those same weight tensors, and calls
  ``AOTInductorModelRunMinimalArrayrefInterfaceV2`` with descriptors that point, zero-copy, at
  its own input buffers (built once: nothing about them changes between calls). The GIL is
  released for the whole call.
- ``loader``: ``AOTIModelPackageLoader`` with one runner per runtime (the runners share the
  weights). Constructed directly: ``torch._inductor.aoti_load_package`` first goes through the
  generic .pt2 archive reader, which costs seconds. Its ``run`` holds the GIL.

A caller (one per runtime and compiled size) owns input buffers of exactly the compiled
shape: fill ``caller.inputs``, call it, and get outputs that the caller of ``run`` owns.
Per-call Python is what separates this path from the raw C call, so nothing is rebuilt per
call: the input descriptors are built once over buffers the caller owns, and the views of the
library's outputs are cached per address. A first version that took the input pointer from
``ndarray.ctypes`` and ``ctypes.memmove``d each output on every call added several times as
much (docs/BENCHMARKS.md, "aoti backend": the bare call, the caller and ``runtime.run``).
"""

from __future__ import annotations

import ctypes
import tempfile
import weakref
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from inferpool.engine.backends import AotiInterface
from inferpool.engine.backends.aoti.abi import (
    DTYPE_CODES,
    AotiError,
    ArrayRefTensor,
    MinimalArrayrefLibrary,
    check_elf,
    describe,
)
from inferpool.engine.backends.aoti.compile import static_shape
from inferpool.engine.schema import Schema

# Output storage is a fresh tensor per call whose address the allocator recycles (7 distinct
# addresses in 1000 calls on the MLP, alternating): views are cached per address, a few at most.
MAX_VIEWS = 8


class Caller(Protocol):
    """One runtime's way to run one compiled size: fill ``inputs``, call, get the outputs."""

    inputs: list[np.ndarray]

    def __call__(self) -> list[np.ndarray]: ...


class Shared(Protocol):
    """One package, loaded once per model and shared by every runtime."""

    def caller(self) -> Caller: ...


class MinimalArrayrefCaller:
    """One runtime's model instance, input buffers and their fixed descriptors."""

    def __init__(self, shared: SharedLibrary) -> None:
        self._lib = shared.lib
        self._handle = shared.lib.create_model(shared.constants)
        weakref.finalize(self, shared.lib.delete_model, self._handle)
        self.inputs = [np.zeros(static_shape(s, shared.batch), s.dtype) for s in shared.schema.inputs]
        self._in = (ArrayRefTensor * len(self.inputs))()
        for desc, array in zip(self._in, self.inputs, strict=True):
            describe(array, desc)
        outputs = [np.empty(static_shape(s, shared.batch), s.dtype) for s in shared.schema.outputs]
        self._outputs = [(a.shape, a.dtype, a.size, DTYPE_CODES[a.dtype]) for a in outputs]
        self._out = (ArrayRefTensor * len(outputs))()
        self._views: list[dict[int, np.ndarray]] = [{} for _ in outputs]
        self._checked = False

    def __call__(self) -> list[np.ndarray]:
        # ctypes drops the GIL for the call; the descriptors point at self.inputs.
        code = self._lib.run_raw(self._handle, len(self._in), self._in, len(self._out), self._out)
        if code != 0:
            raise AotiError(f"AOTInductorModelRunMinimalArrayrefInterfaceV2 failed: {self._lib.last_error()}")
        if not self._checked:
            self._check_layout()
        results = []
        # The outputs live in the library's thread-local storage until this thread's next
        # call: copy them now, before the runtime goes back to the pool.
        for i, (desc, (shape, dtype, numel, code)) in enumerate(zip(self._out, self._outputs, strict=True)):
            if desc.numel != numel or desc.dtype != code:
                raise AotiError(f"output is {desc.numel} x dtype code {desc.dtype}, expected {shape} {dtype}")
            views = self._views[i]
            view = views.get(desc.data)
            if view is None:  # a view of the library's storage for this address, made once
                if len(views) >= MAX_VIEWS:
                    views.clear()
                raw = (ctypes.c_char * (numel * dtype.itemsize)).from_address(desc.data)
                view = views[desc.data] = np.frombuffer(memoryview(raw), dtype).reshape(shape)
            results.append(view.copy())
        return results

    def _check_layout(self) -> None:
        """Once per caller: outputs are C-contiguous of the schema's shape (the views assume it)."""
        for desc, (shape, dtype, _, _) in zip(self._out, self._outputs, strict=True):
            sizes = tuple(desc.sizes[: desc.ndim])
            strides = tuple(desc.strides[: desc.ndim])
            expected = tuple(s // dtype.itemsize for s in np.empty(shape, dtype).strides)
            if sizes != shape or strides != expected:
                raise AotiError(f"output has sizes {sizes} strides {strides}, expected {shape} contiguous")
        self._checked = True


class SharedLibrary:
    """The ``.so`` from a package, opened once, with its weights loaded once."""

    def __init__(self, package: Path, batch: int, schema: Schema) -> None:
        self.batch, self.schema = batch, schema
        with tempfile.TemporaryDirectory(prefix="inferpool-aoti-") as tmp:
            so = Path(tmp) / "model.so"
            so.write_bytes(read_library(package))
            # Deleting the file after dlopen is fine: the mapping stays. The runner dlopens the
            # same path, so both share one copy of the code.
            self.lib = MinimalArrayrefLibrary(so)
            runner = torch._C._aoti.AOTIModelContainerRunnerCpu(str(so), 1)
        by_fqn = runner.extract_constants_map(False)
        # Model instances look constants up by internal name; the map is keyed by original FQN.
        self.constants = {name: by_fqn[fqn] for name, fqn in runner.get_constant_names_to_original_fqns().items()}
        self._runner = runner  # owns the weight storage the constants alias

    def caller(self) -> Caller:
        return MinimalArrayrefCaller(self)


def read_library(package: Path) -> bytes:
    """The package's compiled library, checked: zipfile verifies its CRC, check_elf its extent."""
    with zipfile.ZipFile(package) as archive:
        names = [n for n in archive.namelist() if n.endswith(".so")]
        if len(names) != 1:
            raise AotiError(f"expected one compiled library (.so) in the package, found {len(names)}")
        data = archive.read(names[0])
    check_elf(data)
    return data


class SharedLoader:
    """``AOTIModelPackageLoader`` with ``runners`` concurrent runners over one set of weights."""

    def __init__(self, package: Path, batch: int, schema: Schema, runners: int) -> None:
        self.batch, self.schema = batch, schema
        read_library(package)  # the loader dlopens it too, and a truncated library is a SIGBUS
        self.loader = torch._C._aoti.AOTIModelPackageLoader(str(package), "model", False, runners, -1)

    def caller(self) -> Caller:
        return LoaderCaller(self.loader, self.schema, self.batch)


class LoaderCaller:
    """Input buffers, and tensors aliasing them, made once; the loader's outputs are fresh."""

    def __init__(self, loader: Any, schema: Schema, batch: int) -> None:
        self._run = loader.run
        self.inputs = [np.zeros(static_shape(s, batch), s.dtype) for s in schema.inputs]
        self._tensors = [torch.from_numpy(a) for a in self.inputs]

    def __call__(self) -> list[np.ndarray]:
        return [t.numpy() for t in self._run(self._tensors)]


def load_minimal(package: Path, batch: int, schema: Schema, _runners: int) -> Shared:
    return SharedLibrary(package, batch, schema)


def load_loader(package: Path, batch: int, schema: Schema, runners: int) -> Shared:
    return SharedLoader(package, batch, schema, runners)


INTERFACES: dict[str, Callable[[Path, int, Schema, int], Shared]] = {
    AotiInterface.MINIMAL_ARRAYREF: load_minimal,
    AotiInterface.LOADER: load_loader,
}
