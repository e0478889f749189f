"""Model versions in the request's context: log lines, phase metrics, and the board that says
whether every serving process serves the same model set."""

from __future__ import annotations

import contextvars
import logging

import orjson

from inferpool.service.processes.process_states import DOWN, READY, ProcessBoard
from inferpool.service.telemetry.logs import FORMATTERS, RequestIdFilter, model_served
from inferpool.service.telemetry.metrics import Inference, Metrics


def _formatted(style: str, served: tuple[str, str] | None) -> str:
    def run() -> str:
        model_served.set(served)
        record = logging.LogRecord("inferpool", logging.ERROR, __file__, 1, "it failed", None, None)
        RequestIdFilter().filter(record)
        return FORMATTERS[style]().format(record)

    return contextvars.Context().run(run)


def test_log_lines_name_the_model_and_version_of_their_request():
    assert "[- scale:2] it failed" in _formatted("plain", ("scale", "2"))
    assert "[- digits] it failed" in _formatted("plain", ("digits", ""))
    assert "[-] it failed" in _formatted("plain", None)  # outside a request: as before
    entry = orjson.loads(_formatted("json", ("scale", "2")))
    assert (entry["model"], entry["version"]) == ("scale", "2")
    assert "version" not in orjson.loads(_formatted("json", ("digits", "")))
    assert "model" not in orjson.loads(_formatted("json", None))


def test_phase_metrics_take_the_version_the_request_resolved():
    metrics = Metrics()

    def observe(served: tuple[str, str] | None) -> None:
        model_served.set(served)
        metrics.observe_inference(Inference("scale", 0.0, 0.0, 0.001, 0.0, batch_size=1))

    for served in (("scale", "1"), ("scale", "2"), ("scale", "2"), None):
        contextvars.Context().run(observe, served)
    text = metrics.render().decode()
    assert 'inferpool_inference_seconds_count{model="scale",version="1"} 1.0' in text
    assert 'inferpool_inference_seconds_count{model="scale",version="2"} 2.0' in text
    assert 'inferpool_inference_seconds_count{model="scale",version=""} 1.0' in text


def test_the_board_is_settled_once_every_process_serves_one_generation():
    board = ProcessBoard(3)
    for slot in range(3):
        board.mark(slot, READY, 7)
    assert board.settled(7)
    assert not board.settled(6)
    board.mark(1, READY, 8)  # a replacement with the next model set: the pod is mid-change
    assert board.all_ready()
    assert not board.settled(7)
    assert not board.settled(8)
    board.mark(0, READY, 8)
    board.mark(2, DOWN)
    assert not board.settled(8)
    board.mark(2, READY, 8)
    assert board.settled(8)
    board.start_drain()
    assert not board.settled(8)
