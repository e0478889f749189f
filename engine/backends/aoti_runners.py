"""Loading one AOTInductor package once, and the per-runtime callers that run it.

Two interfaces, picked by ``RuntimeOptions.aoti_interface`` from ``INTERFACES``:

- ``minimal_arrayref``: the package's ``.so`` opened with ctypes (engine.backends.aoti_abi).
  PyTorch's container runner loads the weights once; every runtime creates its own model
  instance (own activations) over those same weight tensors, and calls
  ``AOTInductorModelRunMinimalArrayrefInterfaceV2`` with descriptors of its input arrays.
  The GIL is released for the whole call.
- ``loader``: ``AOTIModelPackageLoader`` with one runner per runtime (the runners share the
  weights). Constructed directly: ``torch._inductor.aoti_load_package`` first goes through the
  generic .pt2 archive reader, which costs seconds. Its ``run`` holds the GIL.

A caller takes arrays of exactly the compiled shape and returns outputs the caller owns.
"""

from __future__ import annotations

import ctypes
import tempfile
import weakref
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from engine.backends.aoti_abi import DTYPE_CODES, AotiError, ArrayRefTensor, MinimalArrayrefLibrary, describe
from engine.backends.aoti_compile import static_shape
from engine.schema import Schema

Caller = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


class Shared(Protocol):
    """One package, loaded once per model and shared by every runtime."""

    def caller(self) -> Caller: ...


class MinimalArrayrefCaller:
    """One runtime's model instance and its reusable descriptors."""

    def __init__(self, shared: SharedLibrary) -> None:
        self._lib = shared.lib
        self._handle = shared.lib.create_model(shared.constants)
        weakref.finalize(self, shared.lib.delete_model, self._handle)
        inputs = [np.zeros(static_shape(s, shared.batch), s.dtype) for s in shared.schema.inputs]
        self._in = (ArrayRefTensor * len(inputs))()
        for desc, array in zip(self._in, inputs, strict=True):
            describe(array, desc)  # sizes, strides, dtype: only ``data`` changes per call
        self._compiled = [(a.shape, a.dtype) for a in inputs]
        outputs = [np.empty(static_shape(s, shared.batch), s.dtype) for s in shared.schema.outputs]
        self._outputs = [(a.shape, a.dtype, a.size, DTYPE_CODES[a.dtype], a.nbytes) for a in outputs]
        self._out = (ArrayRefTensor * len(outputs))()
        self._checked = False

    def __call__(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        for desc, array, (shape, dtype) in zip(self._in, arrays, self._compiled, strict=True):
            if array.shape == shape and array.dtype == dtype and array.flags.c_contiguous:
                desc.data = array.ctypes.data
            else:  # described as it is, so that the library's own numel check refuses it
                describe(np.ascontiguousarray(array), desc)
        # ctypes drops the GIL here; ``arrays`` stay referenced by this frame during the call.
        code = self._lib.run_raw(self._handle, len(self._in), self._in, len(self._out), self._out)
        if code != 0:
            raise AotiError(f"AOTInductorModelRunMinimalArrayrefInterfaceV2 failed: {self._lib.last_error()}")
        if not self._checked:
            self._check_layout()
        results = []
        # The outputs live in the library's thread-local storage until this thread's next
        # call: copy them now, before the runtime goes back to the pool.
        for desc, (shape, dtype, numel, code, nbytes) in zip(self._out, self._outputs, strict=True):
            if desc.numel != numel or desc.dtype != code:
                raise AotiError(f"output is {desc.numel} x dtype code {desc.dtype}, expected {shape} {dtype}")
            result = np.empty(shape, dtype)
            ctypes.memmove(result.ctypes.data, desc.data, nbytes)
            results.append(result)
        return results

    def _check_layout(self) -> None:
        """Once per caller: outputs are C-contiguous of the schema's shape (memmove assumes it)."""
        for desc, (shape, dtype, *_) in zip(self._out, self._outputs, strict=True):
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
        with zipfile.ZipFile(package) as archive, tempfile.TemporaryDirectory(prefix="inferpool-aoti-") as tmp:
            names = [n for n in archive.namelist() if n.endswith(".so")]
            if len(names) != 1:
                raise AotiError(f"expected one compiled library (.so) in the package, found {len(names)}")
            so = Path(archive.extract(names[0], tmp))
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


class SharedLoader:
    """``AOTIModelPackageLoader`` with ``runners`` concurrent runners over one set of weights."""

    def __init__(self, package: Path, runners: int) -> None:
        self.loader = torch._C._aoti.AOTIModelPackageLoader(str(package), "model", False, runners, -1)

    def caller(self) -> Caller:
        loader = self.loader

        def call(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
            # The outputs are fresh tensors the loader hands over: viewing them is safe.
            return [t.numpy() for t in loader.run([torch.from_numpy(a) for a in arrays])]

        return call


def load_minimal(package: Path, batch: int, schema: Schema, _runners: int) -> Shared:
    return SharedLibrary(package, batch, schema)


def load_loader(package: Path, _batch: int, _schema: Schema, runners: int) -> Shared:
    return SharedLoader(package, runners)


INTERFACES: dict[str, Callable[[Path, int, Schema, int], Shared]] = {
    "minimal_arrayref": load_minimal,
    "loader": load_loader,
}
