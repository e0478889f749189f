"""The warm requests (service/http/warmup.py): what they send, to whom, and that their door counts nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np

from inferpool.service.frontdoor import Activity, FrontDoor
from inferpool.service.http.codec import decode_inputs
from inferpool.service.http.warmup import answer, predict_body, uncounted_door, v2_body, warm
from inferpool.service.telemetry.metrics import Metrics
from inferpool.service.v2.codec import parse_request


def _model(schema: Any, name: str = "digits", handler: object = None, dispatch: str = "inline") -> Any:
    return SimpleNamespace(name=name, schema=schema, info=SimpleNamespace(handler=handler, dispatch=dispatch))


class Recorder:
    """A raw handler that answers ``status`` and keeps what it was asked."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.asked: list[tuple[str, dict[str, Any], bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.asked.append((scope["path"], scope["path_params"], message["body"]))
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def test_bodies_are_one_sample_of_zeros_the_codecs_accept(digits_module):
    model = _model(digits_module.schema)
    body = predict_body(model)
    assert body is not None
    np.testing.assert_array_equal(np.asarray(decode_inputs(body)), np.zeros((1, 8, 8)))
    request = parse_request(bytearray(v2_body(model)), None)
    assert {name: array.shape for name, array in request.inputs.items()} == {"image": (1, 1, 8, 8)}


def test_a_handler_model_gets_no_predict_body(digits_module):
    assert predict_body(_model(digits_module.schema, handler=object())) is None


def test_answer_gives_the_handler_the_body_and_returns_its_status():
    handler = Recorder(503)
    assert asyncio.run(answer(handler, "/v2/models/m/infer", {"name": "m"}, b"x")) == 503
    assert handler.asked == [("/v2/models/m/infer", {"name": "m"}, b"x")]


def test_warm_asks_predict_once_and_infer_once_per_model(digits_module, caplog):
    predict, infer = Recorder(), Recorder(400)
    models = [_model(digits_module.schema), _model(digits_module.schema, "other")]
    asyncio.run(warm(predict, infer, models, models[0]))
    assert [path for path, _, _ in predict.asked] == ["/predict"]
    assert [(path, params) for path, params, _ in infer.asked] == [
        ("/v2/models/digits/infer", {"name": "digits"}),
        ("/v2/models/other/infer", {"name": "other"}),
    ]
    assert "warm request to /v2/models/other/infer answered 400" in caplog.text


def test_the_uncounted_door_shares_the_records_and_not_the_counts():
    settings = SimpleNamespace(
        request_timeout_ms=0.0, priority_levels=1, default_priority=1, response_cache_mb=0, response_cache_models=None
    )
    host = SimpleNamespace(settings=settings)
    door = FrontDoor(host, Metrics(), Activity())  # type: ignore[arg-type]
    twin = uncounted_door(door)
    assert twin._served is door._served
    assert twin.activity is not door.activity
    assert twin.metrics is not door.metrics
    twin.metrics.observe_error("load_shed")  # a stand-in: nothing to count into


def test_a_batched_model_is_not_warmed_its_batcher_would_learn_from_a_lone_request(digits_module):
    predict, infer = Recorder(), Recorder()
    models = [_model(digits_module.schema, dispatch="batch"), _model(digits_module.schema, "other")]
    asyncio.run(warm(predict, infer, models, models[0]))
    assert predict.asked == []
    assert [path for path, _, _ in infer.asked] == ["/v2/models/other/infer"]
