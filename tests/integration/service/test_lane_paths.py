"""What the lane keeps by path (service/http/lane_routes.py's ``RouteTable``, and the v2 route's
resolved model: service/http/routes/v2.py): a kept path answers as a new one does, a host not
serving still answers 503 on it, and a new model set is resolved anew."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from inferpool.harness.payloads import digits_v2_json
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.http.fastpath import InferPoolApp
from inferpool.service.http.lane_routes import MOST_PATHS, RouteTable
from tests.integration.service.test_lane import exchange, post, without_volatile

V2 = digits_v2_json()
PATH = "/v2/models/digits/infer"


@pytest.fixture(scope="module")
def app(client: TestClient) -> InferPoolApp:
    app: InferPoolApp = client.app  # type: ignore[assignment]
    assert app.lane is not None
    return app


def routes_of(app: InferPoolApp) -> RouteTable:
    assert app.lane is not None
    return app.lane.routes


def v2_answer(app: InferPoolApp, path: str = PATH) -> bytes:
    answer, _ = exchange(app, post(path, V2.body, "x-request-id: same"))
    return without_volatile(answer)


def test_a_path_seen_before_is_matched_by_the_same_match_and_answered_alike(app):
    first = v2_answer(app)
    routes = routes_of(app)
    kept = routes.match(PATH.encode())
    assert kept is not None
    assert routes.match(PATH.encode()) is kept
    assert kept[0].labels[0] == "/v2/models/{name}/infer"
    assert v2_answer(app) == first
    assert first.startswith(b"HTTP/1.1 200 ")
    assert routes.match(b"/v2/models/digits/infer/more") is None


def test_the_table_stays_small_whatever_paths_clients_send(app):
    table = RouteTable(routes_of(app).routes)
    for index in range(MOST_PATHS * 3):
        assert table.match(b"/v2/models/m%d/infer" % index) is not None
        assert len(table._matched) <= MOST_PATHS


def test_a_kept_model_still_answers_503_while_the_host_is_not_serving(app):
    assert v2_answer(app).startswith(b"HTTP/1.1 200 ")
    host = app.state.host
    host.draining = True
    try:
        answer = v2_answer(app)
    finally:
        host.draining = False
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert v2_answer(app).startswith(b"HTTP/1.1 200 ")


def test_a_new_model_set_is_resolved_anew_and_an_unknown_name_is_a_404(app, monkeypatch):
    resolved: list[tuple[str | None, str | None]] = []
    real = FrontDoor.resolve

    def counted(self: FrontDoor, name: str | None = None, version: str | None = None) -> object:
        resolved.append((name, version))
        return real(self, name, version)

    v2_answer(app)  # the path's model kept, if no test before kept it
    monkeypatch.setattr(FrontDoor, "resolve", counted)
    v2_answer(app)
    assert resolved == []
    host = app.state.host
    host.models = dict(host.models)  # what a load or an unload does: a new set
    v2_answer(app)
    v2_answer(app)
    assert resolved == [("digits", None)]
    assert v2_answer(app, "/v2/models/nope/infer").startswith(b"HTTP/1.1 404 ")
    assert v2_answer(app, "/v2/models/digits/versions/9/infer").startswith(b"HTTP/1.1 404 ")
