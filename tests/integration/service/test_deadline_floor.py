"""The deadline floor end to end in-process, on a model that sleeps 20 ms a call (so its
measured floor is at least 20 ms): shown at /config, held by every infer route, and written
into the spec so that what the spec calls valid the server takes."""

from __future__ import annotations

import re
import time
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # schemathesis brings it, without stubs
import pytest
from fastapi.testclient import TestClient

from tests.integration.service.conftest import app_client
from tests.support.slow_model import CALL_SECONDS, SAMPLE_SECONDS

SAMPLE = [[[0.0] * 8] * 8]
V2 = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": [0.0] * 64}]}
PATHS = ("/predict", "/predict/digits", "/v2/models/digits/infer", "/v2/models/digits/versions/1/infer")


@pytest.fixture(scope="module")
def slow() -> Any:
    with app_client(
        "--model", "tests.support.slow_model:slow_calls", "--runtime.backend", "eager", "--runtime.max-batch-size", "1"
    ) as client:
        yield client


@pytest.fixture(scope="module")
def floor(slow: TestClient) -> int:
    value = slow.get("/v2/models/digits/config").json()["deadline_floor_ms"]
    assert isinstance(value, int)
    assert CALL_SECONDS * 1e3 <= value <= CALL_SECONDS * 1e3 * 10  # measured: a sleep of 20 ms and the CNN
    return value


def _body(path: str) -> dict[str, Any]:
    return V2 if path.startswith("/v2/") else {"inputs": SAMPLE}


@pytest.mark.parametrize("path", PATHS)
def test_a_header_under_the_floor_is_a_400_on_every_infer_route(slow, floor, path):
    answer = slow.post(path, json=_body(path), headers={"X-Request-Timeout-Ms": str(floor - 1)})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == (
        f"X-Request-Timeout-Ms {floor - 1} is below this model's fastest measured call ({floor} ms); "
        f"send at least {floor} or omit it"
    )
    generous = slow.post(path, json=_body(path), headers={"X-Request-Timeout-Ms": str(floor * 50)})
    assert generous.status_code == 200, generous.text


def test_a_v2_timeout_under_the_floor_is_a_400_naming_the_parameter(slow, floor):
    answer = slow.post("/v2/models/digits/infer", json=V2 | {"parameters": {"timeout": floor * 1000 - 1}})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith(f"parameter 'timeout' {floor * 1000 - 1} µs is below")
    taken = slow.post("/v2/models/digits/infer", json=V2 | {"parameters": {"timeout": floor * 1000 * 50}})
    assert taken.status_code == 200, taken.text


def test_the_spec_says_the_floor(slow, floor):
    spec = slow.get("/openapi.json").json()
    for path in (
        "/predict",
        "/predict/{name}",
        "/v2/models/{name}/infer",
        "/v2/models/{name}/versions/{version}/infer",
    ):
        parameters = spec["paths"][path]["post"]["parameters"]
        header = next(p for p in parameters if p["name"] == "X-Request-Timeout-Ms")
        pattern = re.compile(header["schema"]["pattern"])
        assert not pattern.search(str(floor - 1))
        assert pattern.search(str(floor))
        assert f"{floor} or more" in header["description"]
    timeout = spec["components"]["schemas"]["V2InferRequest_digits"]["properties"]["parameters"]["properties"]
    assert timeout["timeout"]["minimum"] == floor * 1000
    config = spec["paths"]["/v2/models/{name}/config"]["get"]["responses"]["200"]["content"]["application/json"]
    answer = slow.get("/v2/models/digits/config").json()
    jsonschema.validate(answer, config["schema"])


@pytest.fixture(scope="module")
def per_sample() -> Any:
    with app_client("--model", "tests.support.slow_model:per_sample_calls", "--runtime.backend", "eager") as client:
        yield client


@pytest.mark.parametrize("path", PATHS)
def test_a_request_of_more_samples_has_a_floor_of_its_own(per_sample, path):
    # 5 ms a sample: one sample's floor is ~6 ms, eight samples' ~41 ms; a deadline between them
    # is taken for one sample and answered 504 at once for eight, naming the header (the spec's
    # floor is one sample's: a request it calls valid is not a 400).
    one = per_sample.get("/v2/models/digits/config").json()["deadline_floor_ms"]
    assert SAMPLE_SECONDS * 1e3 <= one < SAMPLE_SECONDS * 1e3 * 3
    between = one + 10
    eight: dict[str, Any] = {"inputs": [SAMPLE] * 8}
    if path.startswith("/v2/"):
        eight = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [8, 1, 8, 8], "data": [0.0] * 512}]}
    taken = per_sample.post(path, json=_body(path), headers={"X-Request-Timeout-Ms": str(between)})
    assert taken.status_code == 200, taken.text
    started = time.monotonic()
    refused = per_sample.post(path, json=eight, headers={"X-Request-Timeout-Ms": str(between)})
    assert refused.status_code == 504, refused.text
    assert time.monotonic() - started < SAMPLE_SECONDS * 8  # at once: the model never ran it
    message = refused.json()["error"]
    assert message.startswith("X-Request-Timeout-Ms is below this model's fastest measured call for 8 samples ("), (
        message
    )
    needed = int(message.split("send at least ")[1].split()[0])
    assert needed >= SAMPLE_SECONDS * 1e3 * 8
    assert per_sample.post(path, json=eight, headers={"X-Request-Timeout-Ms": str(needed * 3)}).status_code == 200


def test_a_v2_timeout_under_a_larger_request_s_floor_names_the_parameter(per_sample):
    eight = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [8, 1, 8, 8], "data": [0.0] * 512}]}
    answer = per_sample.post("/v2/models/digits/infer", json=eight | {"parameters": {"timeout": 20_000}})
    assert answer.status_code == 504, answer.text
    expected = "parameter 'timeout' is below this model's fastest measured call for 8 samples"
    assert answer.json()["error"].startswith(expected)
    assert answer.json()["error"].endswith(
        "answered at once, without running; send at least "
        f"{int(answer.json()['error'].split('samples (')[1].split()[0]) * 1000} or omit it"
    )


def test_a_server_default_under_a_larger_request_s_floor_is_a_miss_not_the_caller_s_error():
    with app_client("--model", "tests.support.slow_model:per_sample_calls", "--runtime.backend", "eager",
                    "--request-timeout-ms", "20") as client:  # fmt: skip
        answer = client.post("/predict", json={"inputs": [SAMPLE] * 8})
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"].startswith("the deadline is below this model's fastest measured call for 8")
