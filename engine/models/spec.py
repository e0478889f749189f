"""What a model factory hands the engine: the module, example inputs and output names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from inferpool.engine.models.handlers import Handler


@dataclass(frozen=True)
class ModelSpec:
    """A model as a Python factory (``package.module:function``) returns it.

    ``example_inputs`` fixes the input names, dtypes and per-sample shapes; dimension 0 of
    every input and output is the dynamic batch dimension unless ``batched`` is False.
    ``dynamic_dims`` names further dimensions of an input that vary between requests (e.g. a
    sequence length): ``{"input_ids": (1,)}``; the schema marks them ``None``.
    ``held_out`` is the model's own held-out inputs for the int8 accuracy gate (batches of
    arrays named as its inputs; MiniLM: one per text, as a request sends it), used when
    ``runtime.accuracy_inputs`` names no file; without them the gate takes the example inputs
    and seeded random variations of them.
    """

    module: torch.nn.Module
    example_inputs: Mapping[str, torch.Tensor]
    output_names: tuple[str, ...] = ()
    name: str = "model"
    batched: bool = True
    dynamic_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    held_out: Sequence[Mapping[str, np.ndarray]] = ()
    handler: Handler | None = None
