"""InferenceModule: one model, loaded once, immutable and shared by every runtime."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.schema import Array, Schema, TensorSpec, output_names

_NUMPY_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}


@dataclass(frozen=True)
class InferenceModule:
    """The shared, read-only half of serving a model (weights, graph, schema).

    Runtimes hold a reference to ``module``; the weights exist once per process however many
    runtimes there are. Build it with :meth:`from_spec`.
    """

    name: str
    module: torch.nn.Module
    schema: Schema
    example_inputs: Mapping[str, Array]
    held_out: tuple[Mapping[str, Array], ...] = ()
    """The int8 gate's own held-out batches (ModelSpec.held_out)."""

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> InferenceModule:
        module = spec.module
        with suppress(NotImplementedError):  # modules unlifted from torch.export have no eval()
            module.eval()
        module.requires_grad_(False)
        examples = {name: t.detach().contiguous() for name, t in spec.example_inputs.items()}
        inputs = tuple(_spec(name, t, spec.batched, spec.dynamic_dims.get(name, ())) for name, t in examples.items())
        with torch.inference_mode():
            outputs = flatten_outputs(module(*examples.values()))
        names = output_names(len(outputs), spec.output_names)
        schema = Schema(inputs, tuple(_spec(n, t, spec.batched) for n, t in zip(names, outputs, strict=True)))
        held_out = tuple({n: np.ascontiguousarray(a) for n, a in batch.items()} for batch in spec.held_out)
        return cls(spec.name, module, schema, {n: t.numpy() for n, t in examples.items()}, held_out)

    def examples(self, batch: int) -> dict[str, Array]:
        """The example inputs repeated (or cut) to ``batch`` rows; as they are when some input
        has no batch dimension."""
        if not all(spec.batched for spec in self.schema.inputs):
            return dict(self.example_inputs)
        return {n: np.ascontiguousarray(np.resize(a, (batch, *a.shape[1:]))) for n, a in self.example_inputs.items()}

    def outputs_by_name(self, result: object) -> dict[str, Array]:
        return {
            spec.name: tensor.numpy() for spec, tensor in zip(self.schema.outputs, flatten_outputs(result), strict=True)
        }

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


def flatten_outputs(result: object) -> tuple[torch.Tensor, ...]:
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, Mapping):
        result = tuple(result.values())
    if isinstance(result, list | tuple) and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise ModelLoadError(
        f"the model must return a tensor, or a tuple/list/dict of tensors; got {type(result).__name__}"
    )


def _spec(name: str, tensor: torch.Tensor, batched: bool, dynamic: tuple[int, ...] = ()) -> TensorSpec:
    if tensor.dtype not in _NUMPY_DTYPES:
        raise ModelLoadError(f"tensor '{name}' has dtype {tensor.dtype}, which the service cannot carry")
    shape: tuple[Any, ...] = tuple(tensor.shape)
    if batched and shape:
        shape = (None, *shape[1:])
    shape = tuple(None if i in dynamic else d for i, d in enumerate(shape))
    return TensorSpec(name, _NUMPY_DTYPES[tensor.dtype], shape)
