"""When a cold start starts again from the cache it filled (service/processes/warm_restart.py):
only after it wrote cache files, with builder modules imported, and a load short enough to repeat."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from inferpool.service.processes import warm_restart
from inferpool.service.processes.warm_restart import RESTART_WITHIN_SECONDS, restart_reason


@pytest.fixture
def builder_imported(monkeypatch):
    monkeypatch.setattr(warm_restart, "BUILDERS", ("inferpool_test_builder", "inferpool_test_absent"))
    monkeypatch.setitem(sys.modules, "inferpool_test_builder", types.ModuleType("inferpool_test_builder"))


def test_a_short_load_that_filled_the_cache_with_builders_imported_restarts(builder_imported):
    reason = restart_reason({"digits.onnx", "digits.auto.json"}, 8.0)
    assert reason == "this start built 2 cached artifacts and keeps their builders in memory (inferpool_test_builder)"


def test_no_restart_without_cache_writes_builders_or_time_to_spare(builder_imported, monkeypatch, caplog):
    assert restart_reason(set(), 1.0) is None  # a warm start, or a cache that cannot be written
    with caplog.at_level(logging.INFO, logger=warm_restart.__name__):
        assert restart_reason({"minilm.onnx"}, RESTART_WITHIN_SECONDS + 11) is None
    assert "too long to repeat" in caplog.text
    monkeypatch.setattr(warm_restart, "BUILDERS", ("inferpool_test_absent",))
    assert restart_reason({"digits.onnx"}, 1.0) is None  # built without importing any builder
