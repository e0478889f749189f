"""A cold start builds in a forked child (service/processes/cold_build.py), on fake loads: a
"builder" module that the load imports only while its "artifact" is missing from the cache.

The children here are real forks of the test process: what they write, the parent reads."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferpool.service.processes import builders, cold_build
from inferpool.service.processes.builders import BuildersNeeded, builders_loaded, watching_builders
from inferpool.service.processes.cold_build import EVERY_START_SUFFIX, load_lean

BUILDER = "inferpool_test_builder"


@pytest.fixture
def builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A module named as the only builder, importable and not imported yet."""
    (tmp_path / BUILDER).mkdir()
    (tmp_path / BUILDER / "__init__.py").write_text("BUILT = True\n")
    (tmp_path / BUILDER / "part.py").write_text("PART = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(builders, "BUILDERS", (BUILDER,))
    monkeypatch.setattr(builders, "COMPILERS", __name__)  # this module's loads stand for the engine's compilers
    yield
    for name in (BUILDER, f"{BUILDER}.part"):
        sys.modules.pop(name, None)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


class FakeStart:
    """``load`` imports the builder unless the artifact is cached; ``build`` caches it (in
    whichever process runs it) and says which process that was."""

    def __init__(self, cache: Path, build_status: int = 0) -> None:
        self.cache, self.build_status = cache, build_status
        self.artifact, self.built_by = cache / "model.onnx", cache / "built-by"
        self.loads = 0

    def load(self) -> int:
        self.loads += 1
        if not self.artifact.exists():
            importlib.import_module(BUILDER)
        return 0

    def build(self) -> int:
        self.cache.mkdir(parents=True, exist_ok=True)
        self.built_by.write_text(str(os.getpid()))
        if self.build_status == 0:
            importlib.import_module(BUILDER)
            self.artifact.write_text("onnx")
        return self.build_status


def test_refused_builders_raise_past_except_exception(builder):
    assert not issubclass(BuildersNeeded, Exception)  # a backend candidate's failure handler catches those
    with watching_builders(refuse=True), pytest.raises(BuildersNeeded, match=BUILDER):
        importlib.import_module(BUILDER)
    with watching_builders(refuse=True):
        importlib.import_module("json")  # anything else imports as usual
    assert builders_loaded() == []
    with watching_builders(refuse=False) as watch:
        importlib.import_module(f"{BUILDER}.part")  # a module of the builder's: counted as the builder
    assert watch.compiled == [BUILDER]  # once


def test_a_builder_the_model_itself_imports_is_neither_refused_nor_counted(builder, monkeypatch):
    monkeypatch.setattr(builders, "COMPILERS", "inferpool.engine.backends")  # the model's code is not in it
    with watching_builders(refuse=True) as watch:
        importlib.import_module(BUILDER)
    assert builders_loaded() == [BUILDER]
    assert watch.compiled == []


def test_a_warm_start_loads_once_here_without_a_child(builder, listener, tmp_path):
    start = FakeStart(tmp_path / "cache")
    start.cache.mkdir()
    start.artifact.write_text("onnx")
    assert load_lean(start.load, start.build, [start.cache], "digits", listener) == 0
    assert start.loads == 1
    assert not start.built_by.exists()
    assert builders_loaded() == []


def test_a_cold_start_builds_in_a_child_then_loads_from_the_cache_without_builders(builder, listener, tmp_path, caplog):
    start = FakeStart(tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger=cold_build.__name__):
        assert load_lean(start.load, start.build, [start.cache], "digits", listener) == 0
    assert int(start.built_by.read_text()) != os.getpid()  # built in a child
    assert start.loads == 2  # refused at the builder's import, then warm from what the child cached
    assert builders_loaded() == []
    assert f"({BUILDER} would be imported): building them in a child process" in caplog.text
    assert not list(start.cache.glob(f"*{EVERY_START_SUFFIX}"))


@pytest.mark.parametrize("status", [1, 2])
def test_the_childs_failure_is_the_starts_with_its_status(builder, listener, tmp_path, status):
    start = FakeStart(tmp_path / "cache", build_status=status)
    assert load_lean(start.load, start.build, [start.cache], "digits", listener) == status
    assert start.loads == 1  # not loaded again after the child failed
    assert builders_loaded() == []


def test_a_child_killed_by_a_signal_fails_the_start_with_status_1(builder, listener, tmp_path, caplog):
    def killed() -> int:
        os.kill(os.getpid(), signal.SIGKILL)
        return 0

    start = FakeStart(tmp_path / "cache")
    with caplog.at_level(logging.ERROR, logger=cold_build.__name__):
        assert load_lean(start.load, killed, [start.cache], "digits", listener) == 1
    assert "the builder process was killed by SIGKILL" in caplog.text


def test_a_warm_load_that_imports_builders_anyway_skips_the_child_at_later_starts(builder, listener, tmp_path):
    class ExportsEveryStart(FakeStart):  # backend static, a .pt2 source: torch.export at every start
        def load(self) -> int:
            importlib.import_module(BUILDER)
            return 0

    start = ExportsEveryStart(tmp_path / "cache")
    assert load_lean(start.load, start.build, [start.cache], "static", listener) == 0
    assert [path.read_text() for path in start.cache.glob(f"*{EVERY_START_SUFFIX}")] == [f"{BUILDER}\n"]
    start.built_by.unlink()
    sys.modules.pop(BUILDER)
    assert load_lean(start.load, start.build, [start.cache], "static", listener) == 0
    assert not start.built_by.exists()  # loaded here at once, builders and all
    sys.modules.pop(BUILDER)
    assert load_lean(start.load, start.build, [start.cache], "other models", listener) == 0
    assert start.built_by.exists()  # the note is for what it was written for only


def test_a_cache_that_cannot_be_written_loads_here_without_a_child(builder, listener, tmp_path):
    (tmp_path / "a-file").write_text("")
    start = FakeStart(tmp_path / "a-file" / "cache")  # under a file: no directory can be made
    start.built_by = tmp_path / "built-by"
    assert load_lean(start.load, start.build, [start.cache], "digits", listener) == 0
    assert start.loads == 1
    assert not start.built_by.exists()
    assert builders_loaded() == [BUILDER]


def test_a_heavy_model_builds_here_at_once_keeping_the_builders(builder, listener, tmp_path, monkeypatch, caplog):
    peaks = iter([1000.0, 1000.0 + cold_build.HEAVY_MODEL_MB + 1])  # at the watch's start, at the builder's import
    monkeypatch.setattr(builders, "peak_rss_mb", lambda: next(peaks))
    start = FakeStart(tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger=cold_build.__name__):
        assert load_lean(start.load, start.build, [start.cache], "minilm", listener) == 0
    assert start.loads == 1  # not stopped and loaded again
    assert not start.built_by.exists()  # no child
    assert builders_loaded() == [BUILDER]
    assert f"built in this process, keeping the builders ({BUILDER})" in caplog.text


def test_a_thread_left_running_by_the_refused_load_means_no_fork(builder, listener, tmp_path, caplog):
    stop = threading.Event()
    start = FakeStart(tmp_path / "cache")
    refused_load = start.load

    def load_leaving_a_thread() -> int:
        if not stop.is_set() and start.loads == 0:
            threading.Thread(target=stop.wait, name="left-running").start()
        return refused_load()

    try:
        assert load_lean(load_leaving_a_thread, start.build, [start.cache], "digits", listener) == 0
    finally:
        stop.set()
    assert not start.built_by.exists()  # no child
    assert start.loads == 2  # refused, then built here
    assert builders_loaded() == [BUILDER]
    assert "outlived the refused load: building in this process instead" in caplog.text
