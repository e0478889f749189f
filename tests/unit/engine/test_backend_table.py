"""The backend table: names without imports, each backend imported on first lookup."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inferpool.engine.backends import BACKEND_PATHS, BACKENDS, BackendTable
from inferpool.engine.backends.base import Runtime


def test_importing_config_and_engine_loads_no_backend():
    probe = "import sys, config, engine; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    )
    backends = {path.partition(":")[0] for path in BACKEND_PATHS.values()}
    assert not loaded & backends, loaded & backends
    assert "inferpool.engine.backends.aoti.abi" not in loaded  # it opens libtorch through ctypes
    assert "onnxruntime" not in loaded


def test_lookup_imports_the_named_class_once():
    table = BackendTable(BACKEND_PATHS)
    assert sorted(table) == ["aoti", "eager", "onnxruntime", "openvino", "static", "torchscript"]
    eager = table["eager"]
    assert issubclass(eager, Runtime)
    assert table["eager"] is eager is BACKENDS["eager"]
    with pytest.raises(KeyError):
        table["nope"]
