"""Eager PyTorch: the module's own forward under ``torch.inference_mode``."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from inferpool.engine.backends.base import Runtime
from inferpool.engine.schema import Array


class EagerRuntime(Runtime):
    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        # from_numpy/numpy() are views: no copy on the way in or out.
        args = [torch.from_numpy(inputs[spec.name]) for spec in self.module.schema.inputs]
        with torch.inference_mode():
            result = self.module.module(*args)
        self.calls += 1
        return self.module.outputs_by_name(result)
