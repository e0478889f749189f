"""The spec's own promises, in-process: what it lists and how strict its v2 body is. The fuzz
test (test_fuzz.py) holds the server to it; these say what "it" is."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]  # schemathesis brings it, without stubs
import pytest
from fastapi.testclient import TestClient

from inferpool.config import load_settings
from inferpool.service.app import create_app
from inferpool.service.http.openapi_schemas import LISTED_BATCHES
from inferpool.service.v2.codec import HEADER_LENGTH
from tests.integration.service.conftest import app_client

SAMPLE = [[[0.0] * 8] * 8]  # one digits sample, [1, 8, 8]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    with app_client("--runtime.backend", "eager", "--runtime.max-request-samples", "4") as client:
        return client.get("/openapi.json").json()


def v2_body(spec: dict[str, Any]) -> jsonschema.Draft202012Validator:
    schema = spec["components"]["schemas"]["V2InferRequest_digits"]
    return jsonschema.Draft202012Validator(schema | {"components": spec["components"]})


def tensor(shape: list[Any], data: list[Any], **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "image", "datatype": "FP32", "shape": shape, "data": data} | extra]}


def test_path_parameters_list_the_served_models_and_versions(spec):
    paths = spec["paths"]
    for path, method in [("/v2/models/{name}/versions/{version}", "get"), ("/predict/{name}", "post")]:
        parameters = {p["name"]: p["schema"] for p in paths[path][method]["parameters"]}
        assert parameters["name"]["enum"] == ["digits"]
    infer = paths["/v2/models/{name}/versions/{version}/infer"]["post"]
    assert {p["name"]: p["schema"] for p in infer["parameters"]}["version"]["enum"] == ["1"]


def test_several_models_get_one_path_each_where_the_body_depends_on_it(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text('[[models]]\nsource = "tests.support.extra_models:affine"\n')
    app = create_app(load_settings(config, ["--runtime.backend", "eager"]))
    with TestClient(app) as client:
        app.state.host.wait_loaded(60)
        paths = client.get("/openapi.json").json()["paths"]
    assert {"/predict/affine", "/predict/digits", "/v2/models/affine/infer"} <= set(paths)
    assert "/predict/{name}" not in paths
    assert "/v2/models/{name}/infer" not in paths
    body = paths["/predict/affine"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "x" in str(body)
    assert "image" not in str(body)
    assert {p["name"]: p["schema"] for p in paths["/v2/models/{name}"]["get"]["parameters"]}["name"]["enum"] == [
        "digits",
        "affine",
    ]


def test_headers_the_server_reads_are_declared(spec):
    infer = spec["paths"]["/v2/models/{name}/infer"]["post"]
    names = {p["name"] for p in infer["parameters"] if p["in"] == "header"}
    # Inference-Header-Content-Length: described; the last two: test_openapi_traffic.py
    assert names == {"X-Request-Id", "X-Request-Timeout-Ms", "X-Request-Priority", "Cache-Control"}
    assert "example" in infer["requestBody"]["content"]["application/json"]  # /docs fills in a valid one
    assert "version" not in {p["name"] for p in infer["parameters"]}  # the raw route reads no query
    assert "Server-Timing" in infer["responses"]["200"]["headers"]
    assert "securitySchemes" not in spec.get("components", {})  # no key configured


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        (tensor([1, 1, 8, 8], [0.0] * 64), True),  # flat
        (tensor([2, 1, 8, 8], [SAMPLE] * 2), True),  # nested
        (tensor([2, 1, 8, 8], [0.0] * 64), False),  # the shape says 2 samples, the data holds 1
        (tensor([5, 1, 8, 8], [SAMPLE] * 5), False),  # over max_request_samples
        (tensor([1, 8, 8], [0.0] * 64), False),  # rank
        (tensor([1, 1, 8, 8], [True] * 64), False),  # not FP32 values
        ({"inputs": [{"name": "image", "datatype": "INT64", "shape": [1, 1, 8, 8], "data": [0] * 64}]}, False),
        (tensor([1, 1, 8, 8], [0.0] * 64, parameters={"binary_data_size": 256}), False),  # no binary part
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"outputs": [{"name": "label"}]}, True),
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"outputs": [{"name": "nope"}]}, False),
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"id": 7}, False),
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"parameters": {"timeout": 0}}, False),
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"parameters": {"timeout": 999}}, False),  # under 1 ms
        (tensor([1, 1, 8, 8], [0.0] * 64) | {"parameters": {"timeout": 1000}}, True),
    ],
)
def test_v2_body_is_as_strict_as_the_server(spec, body, valid):
    assert v2_body(spec).is_valid(body) is valid


def test_batches_beyond_the_listed_ones_are_said_to_exist():
    with app_client("--runtime.backend", "eager") as client:  # max_request_samples 1024
        schema = client.get("/openapi.json").json()["components"]["schemas"]["V2InferRequest_digits"]
    assert len(schema["anyOf"]) == LISTED_BATCHES
    assert "up to 1024" in schema["description"]


def _accepts(schema: dict[str, Any], value: object) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize(
    ("header", "valid"),
    [
        ("1", True), ("2500", True), ("0", False), ("0.5", False), ("5e-324", False), ("1e3", False),
        ("-5", False), ("+5", False), ("0250", False), ("9" * 20, False),
    ],
)  # fmt: skip
def test_the_deadline_header_the_spec_takes_is_the_one_the_server_takes(spec, header, valid):
    """(A 1 ms deadline is taken, but a loaded machine can miss it: a 504, documented; not sent here.)"""
    infer = spec["paths"]["/predict"]["post"]
    schema = next(p["schema"] for p in infer["parameters"] if p["name"] == "X-Request-Timeout-Ms")
    assert _accepts(schema, header) is valid
    if header == "1":
        return
    with app_client("--runtime.backend", "eager") as client:
        answer = client.post("/predict", json={"inputs": SAMPLE}, headers={"X-Request-Timeout-Ms": header})
    assert answer.status_code == (200 if valid else 400), answer.text


def test_the_binary_header_is_described_not_declared_and_zero_means_all_json(spec):
    """Its valid values are the body's JSON length, which a schema cannot relate to a header:
    declared, any fuzzer sends lengths the spec calls valid and the server must refuse."""
    infer = spec["paths"]["/v2/models/{name}/infer"]["post"]
    assert "Inference-Header-Content-Length" not in {p["name"] for p in infer["parameters"]}
    assert "send 0" in infer["description"]
    with app_client("--runtime.backend", "eager") as client:
        answer = client.post(
            "/v2/models/digits/infer", json=tensor([1, 1, 8, 8], [0.0] * 64), headers={HEADER_LENGTH: "0"}
        )
    assert answer.status_code == 200, answer.text
