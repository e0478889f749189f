"""ONNX model files as a source (``path/to/model.onnx``), served by the onnxruntime backend.

The engine is built on InferenceModule, a torch module with example inputs: the schema comes
from running it on them, and so do the reference answers parity checks compare against. An
ONNX file has no torch module, so ``OnnxFile`` is one around an onnxruntime session on the
file: its example inputs come from the file's declared inputs (a symbolic first dimension is
the batch, other symbolic dimensions vary between requests), and calling it runs the session.
The onnxruntime backend serves the file itself rather than exporting this module
(``onnx_file_session``): there is nothing to export, and the session it builds with the
serving options replaces this module's own, so that the weights are held once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferpool.engine.errors import ModelLoadError, import_optional
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.models.spec import ModelSpec

# onnxruntime's element types, as its sessions name them, to the tensors the engine carries.
DTYPES: dict[str, torch.dtype] = {
    "tensor(float)": torch.float32,
    "tensor(double)": torch.float64,
    "tensor(float16)": torch.float16,
    "tensor(int64)": torch.int64,
    "tensor(int32)": torch.int32,
    "tensor(int16)": torch.int16,
    "tensor(int8)": torch.int8,
    "tensor(uint8)": torch.uint8,
    "tensor(bool)": torch.bool,
}
EXAMPLE_BATCH = 2  # a first dimension of 1 could hide a model that is not really batched
EXAMPLE_DYNAMIC = 1  # other symbolic dimensions (a sequence length): any size does


def _onnxruntime() -> Any:
    return import_optional("onnxruntime", "an ONNX model", "pip install 'inferpool[onnx]'")


def _load_options() -> Any:
    """One thread and no inter-op pool: a session built while loading starts no thread, so the
    process can still fork serving processes that share it."""
    options = _onnxruntime().SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


class OnnxFile(torch.nn.Module):
    """An ONNX file as a torch module: ``forward`` runs it in an onnxruntime session."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._session = self._open(_load_options())
        self._inputs = [i.name for i in self._session.get_inputs()]

    def _open(self, options: Any) -> Any:
        ort = _onnxruntime()
        try:
            return ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a missing, truncated or invalid file; an op this build lacks
            raise ModelLoadError(f"onnxruntime cannot load the ONNX model {str(self.path)!r}: {exc}") from exc

    @property
    def session(self) -> Any:
        return self._session

    def serving_session(self, options: Any) -> Any:
        """A session on the file with the backend's ``options``, which this module's own calls
        use from now on too (its load-time session is dropped: the weights exist once)."""
        self._session = session = self._open(options)  # one assignment: a concurrent call sees either
        return session

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feeds = {name: np.ascontiguousarray(t.numpy()) for name, t in zip(self._inputs, inputs, strict=True)}
        return tuple(torch.from_numpy(np.asarray(out)) for out in self._session.run(None, feeds))


def load_onnx(source: str) -> ModelSpec:
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"ONNX model {source!r} does not exist; give the path of a .onnx file")
    module = OnnxFile(path)
    inputs, outputs = module.session.get_inputs(), module.session.get_outputs()
    batched = bool(inputs) and all(i.shape and not isinstance(i.shape[0], int) for i in inputs)
    examples, dynamic = {}, {}
    for declared in inputs:
        dtype = DTYPES.get(declared.type)
        if dtype is None:
            known = ", ".join(sorted(DTYPES))
            raise ModelLoadError(f"ONNX input {declared.name!r} is {declared.type}; the service carries {known}")
        sizes = [_example_size(d, i, batched) for i, d in enumerate(declared.shape)]
        examples[declared.name] = torch.zeros(sizes, dtype=dtype)
        varying = tuple(i for i, d in enumerate(declared.shape) if i > 0 and not isinstance(d, int))
        if varying:
            dynamic[declared.name] = varying
    names = tuple(o.name for o in outputs)
    return ModelSpec(module, examples, names, name=path.stem, batched=batched, dynamic_dims=dynamic)


def _example_size(dim: object, axis: int, batched: bool) -> int:
    if isinstance(dim, int):
        return dim
    return EXAMPLE_BATCH if axis == 0 and batched else EXAMPLE_DYNAMIC


def onnx_file_session(module: InferenceModule, session_options: Any) -> Any | None:
    """For the onnxruntime backend: the session serving ``module`` with ``session_options`` when
    it is an ONNX file, or None for a torch model (which the backend exports and checks)."""
    if not isinstance(module.module, OnnxFile):
        return None
    return module.module.serving_session(session_options)
