"""The C ABI of an AOTInductor library compiled with the minimal ArrayRef interface, via ctypes.

Mirrors torch/include/torch/csrc/inductor/aoti_runtime/interface.h of torch 2.13:
``AOTInductorArrayRefTensor`` (192 bytes, static-asserted there and checked here), the
``AOTInductorConstantMapEntry`` pairs, ``AOTInductorModelCreateV2``,
``AOTInductorModelUpdateConstantsMapV2``, ``AOTInductorModelRunMinimalArrayrefInterfaceV2`` and
``AOTInductorGetLastError``. A wrong layout here is silent memory corruption, which is why the
struct size is checked at import and the dtype codes come from libtorch itself.

ctypes releases the GIL for the duration of every foreign call, so a model call runs in
parallel with Python on other threads -- the reason this path exists.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

MAX_DIMS = 8  # AOTI_ARRAYREF_TENSOR_MAX_DIMS
SUCCESS = 0  # AOTI_RUNTIME_SUCCESS


class ArrayRefTensor(ctypes.Structure):
    """``AOTInductorArrayRefTensor``: a borrowed, contiguous tensor described by plain C types."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("numel", ctypes.c_int64),
        ("sizes", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_idx", ctypes.c_int32),
        ("reserved", ctypes.c_int64 * 4),
    ]


class ConstantMapEntry(ctypes.Structure):
    """``AOTInductorConstantMapEntry``: a constant's internal name and an owned AtenTensorHandle."""

    _fields_ = [("name", ctypes.c_char_p), ("handle", ctypes.c_void_p)]


if ctypes.sizeof(ArrayRefTensor) != 192:  # the header's static_assert
    raise ImportError(f"AOTInductorArrayRefTensor layout mismatch: {ctypes.sizeof(ArrayRefTensor)} bytes, not 192")

_NUMPY_NAMES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def _libtorch_codes() -> tuple[dict[np.dtype, int], int]:
    """dtype codes and the CPU device code as libtorch's own shim functions return them."""
    libtorch = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))

    def code(symbol: str) -> int:
        function = getattr(libtorch, symbol)
        function.restype = ctypes.c_int32
        return int(function())

    codes = {np.dtype(name): code(f"aoti_torch_dtype_{name}") for name in _NUMPY_NAMES}
    return codes, code("aoti_torch_device_type_cpu")


DTYPE_CODES, CPU_DEVICE = _libtorch_codes()

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def describe(array: np.ndarray, desc: ArrayRefTensor) -> None:
    """Point ``desc`` at a C-contiguous array's memory (zero-copy; keep the array alive)."""
    desc.data = array.ctypes.data
    desc.numel = array.size
    desc.ndim = array.ndim
    desc.dtype = DTYPE_CODES[array.dtype]
    desc.device_type = CPU_DEVICE
    desc.device_idx = 0
    for i, (size, stride) in enumerate(zip(array.shape, array.strides, strict=True)):
        desc.sizes[i] = size
        desc.strides[i] = stride // array.itemsize


def owned_handles(constants: Mapping[str, torch.Tensor]) -> ctypes.Array[ConstantMapEntry]:
    """Constant-map entries holding new ``at::Tensor`` handles that alias ``constants`` (the
    weights are not copied); the library takes ownership of the handles it is given."""
    names = list(constants)
    capsules = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors([constants[name] for name in names])
    entries = (ConstantMapEntry * len(names))()
    for entry, name, capsule in zip(entries, names, capsules, strict=True):
        entry.name = name.encode()
        entry.handle = _capsule_pointer(capsule, None)
    return entries


class AotiError(RuntimeError):
    """A call into the compiled library returned a failure code; the message is the library's."""


def check_elf(data: bytes) -> None:
    """Refuse a shared library whose segments or sections reach past its end: dlopen maps such a
    file without complaint and the process dies of SIGBUS when a missing page is touched."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise AotiError("the compiled library is not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        raise AotiError(f"the compiled library is truncated ({len(data)} bytes; its headers lie beyond)")
    for i in range(phnum):
        offset, _, _, filesz = struct.unpack_from("<QQQQ", data, phoff + i * phentsize + 8)
        if offset + filesz > len(data):
            end = offset + filesz
            raise AotiError(f"the compiled library is truncated ({len(data)} bytes; a segment ends at {end})")


class MinimalArrayrefLibrary:
    """One loaded ``.so`` compiled with ``aot_inductor.use_minimal_arrayref_interface``."""

    def __init__(self, path: Path) -> None:
        # Raises OSError (not an ELF file, truncated) or AttributeError (a library compiled
        # without the minimal interface lacks the V2 entry point); the caller names the file.
        lib = ctypes.CDLL(str(path))
        self._create = lib.AOTInductorModelCreateV2
        self._create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ConstantMapEntry), ctypes.c_size_t]
        self._update = lib.AOTInductorModelUpdateConstantsMapV2
        self._update.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConstantMapEntry), ctypes.c_int32]
        self._delete = lib.AOTInductorModelDelete
        self._delete.argtypes = [ctypes.c_void_p]
        self.run_raw = lib.AOTInductorModelRunMinimalArrayrefInterfaceV2
        """The model call itself: (handle, n_in, inputs*, n_out, outputs*) -> return code."""
        self.run_raw.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int32,
            ctypes.POINTER(ArrayRefTensor),
            ctypes.c_int32,
            ctypes.POINTER(ArrayRefTensor),
        ]
        self.run_raw.restype = ctypes.c_int32
        self._last_error = lib.AOTInductorGetLastError
        self._last_error.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        for function in (self._create, self._update, self._delete, self._last_error):
            function.restype = ctypes.c_int32
        self.lib = lib  # keeps the library mapped while any model handle lives

    def last_error(self) -> str:
        """The library's message for the last failed call on this thread."""
        message = ctypes.c_char_p()
        self._last_error(ctypes.byref(message))
        return (message.value or b"unknown error").decode(errors="replace")

    def check(self, code: int, what: str) -> None:
        if code != SUCCESS:
            raise AotiError(f"{what} failed: {self.last_error()}")

    def create_model(self, constants: Mapping[str, torch.Tensor]) -> ctypes.c_void_p:
        """A new model instance (its own activations) using ``constants`` without copying them.

        CreateV2 with a constant map fills only the name -> tensor map, not the array that the
        generated code indexes, so the map is set again through UpdateConstantsMapV2, which
        rebuilds that array (found by reading model_base.h; a bare CreateV2 fails at run time
        with vector::_M_range_check).
        """
        handle = ctypes.c_void_p()
        entries = owned_handles(constants)
        self.check(self._create(ctypes.byref(handle), entries, len(entries)), "AOTInductorModelCreateV2")
        entries = owned_handles(constants)
        self.check(self._update(handle, entries, len(entries)), "AOTInductorModelUpdateConstantsMapV2")
        return handle

    def delete_model(self, handle: ctypes.c_void_p) -> None:
        self.check(self._delete(handle), "AOTInductorModelDelete")
