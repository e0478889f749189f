"""``inferpool compile``: argument handling, progress, the cache and exit codes. The AOTInductor
compile step itself is replaced by a stub that writes a file (real compiles run in
tests/unit/engine/test_backend_aoti.py); the ONNX export is real (a few seconds for the MLP)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from inferpool.cli.compile import artifacts
from inferpool.cli.main import main
from inferpool.engine.backends.aoti import compile as aoti_compile
from inferpool.engine.options import RuntimeOptions


@pytest.fixture
def compiled(monkeypatch) -> list[Path]:
    calls: list[Path] = []

    def stub(program, path: Path, *, interface: str) -> None:
        calls.append(path)
        path.write_bytes(b"package")

    monkeypatch.setattr(aoti_compile, "compile_package", stub)
    return calls


def args(cache: Path, *extra: str) -> list[str]:
    flags = ["--model", "inferpool.engine.zoo.mlp:build", "--runtime.compiled-batch-sizes", "[1,2]"]
    return ["compile", *flags, "--runtime.compile-cache-dir", str(cache), *extra]


def test_compiles_each_batch_size_once_then_uses_the_cache(tmp_path, compiled, capsys):
    """A backend that reads no package (eager here) gets the AOTInductor packages, to be served
    with --runtime.backend aoti."""
    assert main(args(tmp_path, "--runtime.backend", "eager")) == 0
    first = capsys.readouterr().out
    assert len(compiled) == 2
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("mlp-*.pt2")) == ["b1", "b2"]
    assert "batch 2: compiling with AOTInductor" in first
    assert "2 package(s), 2 compiled now, 0 cached" in first
    assert f"the cache is in {tmp_path}" in first
    assert "serve with: inferpool serve --model inferpool.engine.zoo.mlp:build" in first
    assert first.rstrip().endswith("--runtime.backend eager --runtime.backend aoti")
    assert not list(tmp_path.glob("*.onnx"))
    assert main(args(tmp_path, "--runtime.backend", "eager")) == 0
    assert len(compiled) == 2  # nothing compiled the second time
    assert "0 compiled now, 2 cached" in capsys.readouterr().out


def test_bad_setting_exits_2(tmp_path, compiled, capsys):
    assert main(args(tmp_path, "--runtime.aoti-interface", "ctypes")) == 2
    assert "aoti_interface='ctypes' is invalid" in capsys.readouterr().err
    assert compiled == []


def test_unloadable_model_exits_1(tmp_path, compiled, capsys):
    assert main(["compile", "--model", "no.such.module:build", "--runtime.compile-cache-dir", str(tmp_path)]) == 1
    assert "cannot import model factory" in capsys.readouterr().err


def no_export(monkeypatch) -> None:
    def exporter(*args, **kwargs):
        raise AssertionError("the ONNX exporter ran although the export is cached")

    monkeypatch.setattr(torch.onnx, "export", exporter)


def test_auto_prepares_the_onnx_export_which_a_second_run_finds(tmp_path, compiled, capsys, monkeypatch):
    assert main(args(tmp_path)) == 0  # backend auto, by default
    first = capsys.readouterr().out
    (path,) = tmp_path.glob("mlp-*.onnx")
    assert "exported to ONNX in" in first
    assert f"-> {path}" in first
    assert "ONNX export exported now and checked against eager in onnxruntime" in first
    assert compiled == []  # auto does not time aoti unless auto_backends lists it
    assert first.rstrip().endswith(f"--runtime.compile-cache-dir {tmp_path}")  # serve as configured
    no_export(monkeypatch)
    assert main(args(tmp_path)) == 0
    assert "ONNX export from the cache and checked against eager" in capsys.readouterr().out


def test_prepare_names_what_to_build(tmp_path, compiled, capsys):
    both = ("--prepare", "aoti", "--prepare", "onnxruntime")
    assert main(args(tmp_path, "--runtime.backend", "onnxruntime", *both)) == 0
    assert len(compiled) == 2
    assert len(list(tmp_path.glob("mlp-*.onnx"))) == 1
    assert capsys.readouterr().out.rstrip().endswith("--runtime.backend onnxruntime")


@pytest.mark.parametrize(
    ("backend", "auto_backends", "expected"),
    [
        ("onnxruntime", (), ("onnxruntime",)),
        ("openvino", (), ("onnxruntime",)),  # it compiles onnxruntime's cached export
        ("aoti", (), ("aoti",)),
        ("static", (), ("aoti",)),
        ("auto", (), ("onnxruntime",)),
        ("auto", ("aoti", "eager"), ("aoti",)),
        ("auto", ("eager", "aoti", "onnxruntime"), ("onnxruntime", "aoti")),
        ("auto", ("eager", "static"), ()),
        ("auto", ("eager", "openvino"), ("onnxruntime",)),
    ],
)
def test_what_each_backend_reads_from_the_cache(backend, auto_backends, expected):
    assert artifacts(RuntimeOptions(backend=backend, auto_backends=auto_backends)) == expected


def test_an_onnx_file_has_nothing_to_prepare(tmp_path, compiled, capsys):
    """An ONNX model is served by onnxruntime from the file itself: no export, no package."""
    model = torch.nn.Linear(4, 3).eval()
    path = tmp_path / "model.onnx"
    with warnings.catch_warnings():  # the exporter's own deprecation chatter
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 4),), path, input_names=["x"], output_names=["y"], dynamo=True)
    cache = tmp_path / "cache"
    argv = ["compile", "--model", str(path), "--runtime.compile-cache-dir", str(cache)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{path}: nothing to prepare, it is served as it is" in out
    assert compiled == []
    assert not any(cache.glob("*.onnx"))
