"""The spec's X-Request-Priority and Cache-Control headers and v2 ``parameters.priority``
(service/http/traffic_spec.py): declared on every route that runs a model, and taking exactly
what the server takes, with priorities on (three levels) and off (one: anything goes); and v2's
``timeout`` parameter beside it, an integer alike."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]  # schemathesis brings it, without stubs
import pytest
from fastapi.testclient import TestClient

from tests.integration.service.conftest import app_client

SAMPLE = [[[0.0] * 8] * 8]  # one digits sample, [1, 8, 8]
V2 = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": [0.0] * 64}]}
MODEL_ROUTES = {
    "/predict", "/predict/{name}", "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer",
}  # fmt: skip


@pytest.fixture(scope="module")
def leveled() -> Any:
    args = ("--runtime.backend", "eager", "--priority-levels", "3", "--default-priority", "2")
    with app_client(*args) as client:
        yield client, client.get("/openapi.json").json()


@pytest.fixture(scope="module")
def one_level() -> Any:
    with app_client("--runtime.backend", "eager") as client:
        yield client, client.get("/openapi.json").json()


def _header(spec: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    return next(p for p in spec["paths"][path]["post"]["parameters"] if p["name"] == name)


def _parameter(spec: dict[str, Any]) -> dict[str, Any]:
    schema = spec["components"]["schemas"]["V2InferRequest_digits"]
    found: dict[str, Any] = schema["properties"]["parameters"]["properties"]["priority"]
    return found


def _accepts(schema: dict[str, Any], value: object) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def test_both_headers_are_declared_where_a_model_runs_and_nowhere_else(leveled):
    _, spec = leveled
    declared = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            runs_a_model = "X-Request-Timeout-Ms" in names
            assert ("X-Request-Priority" in names) is runs_a_model, (method, path)
            assert ("Cache-Control" in names) is runs_a_model, (method, path)
            if runs_a_model:
                declared.add(path)
    assert declared >= MODEL_ROUTES
    assert "no-cache" in _header(spec, "/predict", "Cache-Control")["description"]


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        ("0", True), ("1", True), ("3", True), ("0003", True), ("4", False), ("00001", False), ("-1", False),
        ("+1", False), ("1.0", False), ("one", False), ("", False), ("10", False),
    ],
)  # fmt: skip
def test_the_priority_header_the_spec_takes_is_the_one_the_server_takes(leveled, header, valid):
    client, spec = leveled
    for path in ("/predict", "/v2/models/{name}/infer"):
        assert _accepts(_header(spec, path, "X-Request-Priority")["schema"], header) is valid
    answer = client.post("/predict", json={"inputs": SAMPLE}, headers={"X-Request-Priority": header})
    assert answer.status_code == (200 if valid else 400), answer.text


def test_the_header_may_have_optional_whitespace_and_sixteen_levels_are_written_out():
    from inferpool.service.http.traffic_spec import level_pattern
    from inferpool.service.priorities import Priorities

    assert _accepts({"type": "string", "pattern": level_pattern(3)}, " 2\t")
    assert Priorities(3).level(None, b" 2\t") == 2
    sixteen = {"type": "string", "pattern": level_pattern(16)}
    taken = [str(n) for n in range(100) if _accepts(sixteen, str(n))]
    assert taken == [str(n) for n in range(17)]
    assert _accepts(sixteen, "0016")
    assert not _accepts(sixteen, "00016")  # five digits: the server refuses them


@pytest.mark.parametrize(
    ("priority", "valid"),
    [
        (0, True), (1, True), (3, True), (None, True), (1.0, True), (3.0, True), (4, False), (4.0, False),
        (-1, False), (True, False), (1.5, False), ("1", False),
    ],
)  # fmt: skip
def test_the_v2_priority_parameter_the_spec_takes_is_the_one_the_server_takes(leveled, priority, valid):
    client, spec = leveled
    assert _accepts(_parameter(spec), priority) is valid
    answer = client.post("/v2/models/digits/infer", json=V2 | {"parameters": {"priority": priority}})
    assert answer.status_code == (200 if valid else 400), answer.text


@pytest.mark.parametrize(
    ("timeout", "valid"),
    [
        (60_000_000, True), (60_000_000.0, True), (60_000_000.5, False), (999, False), (999.0, False),
        ("60000000", False), (True, False), (None, False),
    ],
)  # fmt: skip
def test_the_v2_timeout_parameter_beside_it_is_as_the_server_takes_it_too(leveled, timeout, valid):
    """An integer of µs as JSON Schema counts them (60000000.0 too), at or above the model's floor."""
    client, spec = leveled
    schema = spec["components"]["schemas"]["V2InferRequest_digits"]["properties"]["parameters"]["properties"]
    assert _accepts(schema["timeout"], timeout) is valid
    answer = client.post("/v2/models/digits/infer", json=V2 | {"parameters": {"timeout": timeout}})
    assert answer.status_code == (200 if valid else 400), answer.text


def test_with_one_level_the_spec_takes_any_priority_as_the_server_does(one_level):
    client, spec = one_level
    header = _header(spec, "/predict", "X-Request-Priority")
    assert header["schema"] == {"type": "string"}
    assert "Ignored" in header["description"]
    assert "type" not in _parameter(spec)
    answer = client.post("/predict", json={"inputs": SAMPLE}, headers={"X-Request-Priority": "any"})
    assert answer.status_code == 200, answer.text
    answer = client.post("/v2/models/digits/infer", json=V2 | {"parameters": {"priority": "any"}})
    assert answer.status_code == 200, answer.text


def test_the_spec_is_the_same_when_asked_again(leveled):
    client, spec = leveled
    assert isinstance(client, TestClient)
    assert client.get("/openapi.json").json() == spec  # declared once, not once more a request
