"""Compiled artifacts are built under the threads serve loads with: the loading plan, the
AOTInductor cache key that follows the thread count, and ``inferpool compile`` applying both."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inferpool.cli.main import main
from inferpool.engine import ConfigError, InferenceModule, RuntimeOptions
from inferpool.engine.backends.aoti import compile as aoti_compile
from inferpool.engine.plan.threads import apply_loading_plan
from inferpool.engine.zoo.mlp import build


@pytest.fixture
def torch_threads():
    """Leaves torch's intra-op thread count as the session set it (tests/conftest.py)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_loading_for_a_fork_uses_one_thread_and_returns_the_serving_plan(torch_threads):
    options = RuntimeOptions(num_runtimes=1, intra_op_threads=2, oversubscribe=True)  # any machine
    plan = apply_loading_plan(options, forks=True)
    assert (plan.runtimes, plan.intra_op_threads) == (1, 2)  # what the runtimes serve with
    assert torch.get_num_threads() == 1  # what is loaded, compiled and checked under
    apply_loading_plan(options, forks=False)
    assert torch.get_num_threads() == 2


def test_loading_refuses_a_budget_the_plan_refuses():
    with pytest.raises(ConfigError, match="num_runtimes=64 x intra_op_threads=64"):
        apply_loading_plan(RuntimeOptions(num_runtimes=64, intra_op_threads=64), forks=True)


def test_the_package_key_follows_the_thread_count(torch_threads):
    """Inductor generates OpenMP regions for torch's thread count at compile time, so a package
    built under 2 threads is not the one serve (which loads under 1) may use."""
    program = aoti_compile.export_at(InferenceModule.from_spec(build()), 1)
    torch.set_num_threads(1)
    one = aoti_compile.program_key(program, 1, "minimal_arrayref")
    torch.set_num_threads(2)
    assert aoti_compile.program_key(program, 1, "minimal_arrayref") != one
    torch.set_num_threads(1)
    assert aoti_compile.program_key(program, 1, "minimal_arrayref") == one


def test_inferpool_compile_builds_under_the_loading_plan(tmp_path: Path, monkeypatch, torch_threads, capsys):
    threads: list[int] = []

    def stub(program, path: Path, *, interface: str) -> None:
        threads.append(torch.get_num_threads())
        path.write_bytes(b"package")

    monkeypatch.setattr(aoti_compile, "compile_package", stub)
    torch.set_num_threads(2)  # torch's default on a 2-core machine: what compile ran under before
    flags = [
        "--model",
        "inferpool.engine.zoo.mlp:build",
        "--runtime.backend",
        "aoti",
        "--runtime.compiled-batch-sizes",
        "[1,2]",
    ]
    assert main(["compile", *flags, "--runtime.compile-cache-dir", str(tmp_path)]) == 0
    assert threads == [1, 1]
    assert "2 compiled now" in capsys.readouterr().out


def test_inferpool_compile_refuses_a_budget_serve_refuses(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr(aoti_compile, "compile_package", None)  # must not be reached
    flags = [
        "--model",
        "inferpool.engine.zoo.mlp:build",
        "--runtime.num-runtimes",
        "64",
        "--runtime.intra-op-threads",
        "64",
    ]
    assert main(["compile", *flags, "--runtime.compile-cache-dir", str(tmp_path)]) == 2
    assert "num_runtimes=64 x intra_op_threads=64" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
