"""``inferpool compile``: argument handling, progress, the cache and exit codes. The compile step
itself is replaced by a stub that writes a file (real compiles run in tests/engine/test_backend_aoti.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.backends import aoti_compile
from service.cli import main


@pytest.fixture
def compiled(monkeypatch) -> list[Path]:
    calls: list[Path] = []

    def stub(program, path: Path, *, interface: str) -> None:
        calls.append(path)
        path.write_bytes(b"package")

    monkeypatch.setattr(aoti_compile, "compile_package", stub)
    return calls


def args(cache: Path, *extra: str) -> list[str]:
    flags = ["--model", "engine.zoo.mlp:build", "--runtime.compiled-batch-sizes", "[1,2]"]
    return ["compile", *flags, "--runtime.compile-cache-dir", str(cache), *extra]


def test_compiles_each_batch_size_once_then_uses_the_cache(tmp_path, compiled, capsys):
    assert main(args(tmp_path)) == 0
    first = capsys.readouterr().out
    assert len(compiled) == 2
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("mlp-*.pt2")) == ["b1", "b2"]
    assert "batch 2: compiling with AOTInductor" in first
    assert "2 package(s), 2 compiled now, 0 cached" in first
    assert f"packages are in {tmp_path}" in first
    assert "serve them with: inferpool serve --model engine.zoo.mlp:build" in first
    assert first.rstrip().endswith("--runtime.backend aoti")
    assert main(args(tmp_path)) == 0
    assert len(compiled) == 2  # nothing compiled the second time
    assert "0 compiled now, 2 cached" in capsys.readouterr().out


def test_bad_setting_exits_2(tmp_path, compiled, capsys):
    assert main(args(tmp_path, "--runtime.aoti-interface", "ctypes")) == 2
    assert "aoti_interface='ctypes' is invalid" in capsys.readouterr().err
    assert compiled == []


def test_unloadable_model_exits_1(tmp_path, compiled, capsys):
    assert main(["compile", "--model", "no.such.module:build", "--runtime.compile-cache-dir", str(tmp_path)]) == 1
    assert "cannot import model factory" in capsys.readouterr().err
