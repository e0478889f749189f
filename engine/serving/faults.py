"""Checks on what a model returns, for ``RuntimeOptions.check_outputs``."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from inferpool.engine.errors import NonFiniteOutput
from inferpool.engine.schema import Array


def check_finite(outputs: Mapping[str, Array]) -> None:
    """Raise NonFiniteOutput naming the first float output that holds NaN or infinity.
    Integer and boolean outputs cannot, so they cost nothing."""
    for name, array in outputs.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            raise NonFiniteOutput(f"the model returned NaN or infinity in output '{name}'")
