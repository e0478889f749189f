"""Checks the backend tests share: a digits answer against eager, and a package made absent."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from inferpool.engine.backends.onnxruntime.export import WEIGHTS_SUFFIX
from inferpool.engine.models.module import InferenceModule

Reference = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def check_digits(
    got: dict[str, np.ndarray], images: np.ndarray, reference: Reference, rtol: float, atol: float
) -> None:
    """``got`` is the digits model's answer on ``images``: eager's within the tolerance, same dtypes."""
    probabilities, label = reference(images)
    np.testing.assert_allclose(got["probabilities"], probabilities, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(got["label"], label)
    assert got["probabilities"].dtype == np.float32
    assert got["label"].dtype == np.int64


def hide_package(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """``importlib.import_module(package)`` fails as for a package that is not installed."""
    real_import = importlib.import_module

    def absent(name: str, parent: str | None = None):  # type: ignore[no-untyped-def]
        if name == package:
            raise ModuleNotFoundError(f"No module named {package!r}")
        return real_import(name, parent)

    monkeypatch.setattr(importlib, "import_module", absent)


def mapped(module: InferenceModule) -> bool:
    """Every parameter lives in a mapping of the cache's weights file (the torch copy released)."""
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].endswith(WEIGHTS_SUFFIX):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            spans.append((start, end))
    pointers = [p.untyped_storage().data_ptr() for p in module.module.parameters()]
    return all(any(a <= ptr < b for a, b in spans) for ptr in pointers)
