"""What a model factory hands the engine: the module, example inputs and output names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class ModelSpec:
    """A model as a Python factory (``package.module:function``) returns it.

    ``example_inputs`` fixes the input names, dtypes and per-sample shapes; dimension 0 of
    every input and output is the dynamic batch dimension unless ``batched`` is False.
    ``dynamic_dims`` names further dimensions of an input that vary between requests (e.g. a
    sequence length): ``{"input_ids": (1,)}``; the schema marks them ``None``.
    """

    module: torch.nn.Module
    example_inputs: Mapping[str, torch.Tensor]
    output_names: tuple[str, ...] = ()
    name: str = "model"
    batched: bool = True
    dynamic_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
