"""The committed gRPC message module is what the committed .proto generates (`make proto`)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from inferpool.harness.server import REPO_ROOT

PROTO = "inferpool/service/grpc/inference.proto"


@pytest.mark.parametrize("suffix", ["_pb2.py", "_pb2.pyi"])
def test_generated_module_is_current(tmp_path, suffix):
    (tmp_path / PROTO).parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / PROTO, tmp_path / PROTO)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=.", PROTO],
        cwd=tmp_path,
        check=True,
    )
    generated = PROTO.replace(".proto", suffix)
    fresh = (tmp_path / generated).read_text()
    assert (REPO_ROOT / generated).read_text() == fresh, f"{generated} is stale: run `make proto` and commit it"
