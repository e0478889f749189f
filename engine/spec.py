"""What a model factory hands the engine: the module, example inputs and output names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelSpec:
    """A model as a Python factory (``package.module:function``) returns it.

    ``example_inputs`` fixes the input names, dtypes and per-sample shapes; dimension 0 of
    every input and output is the dynamic batch dimension unless ``batched`` is False.
    """

    module: torch.nn.Module
    example_inputs: Mapping[str, torch.Tensor]
    output_names: tuple[str, ...] = ()
    name: str = "model"
    batched: bool = True
