"""POST /predict through the ASGI app in-process (routes, codec, error mapping)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.service.conftest import app_client


def test_one_sample_matches_eager(client, images, reference):
    response = client.post("/predict", json={"inputs": images[0].tolist()})
    assert response.status_code == 200
    body = response.json()
    probabilities, label = reference(images[:1])
    assert body["model"] == "digits"
    np.testing.assert_allclose(body["outputs"]["probabilities"], probabilities[0], rtol=1e-5, atol=1e-7)
    assert body["outputs"]["label"] == int(label[0])


def test_batch_by_input_name_matches_eager(client, images, reference):
    response = client.post("/predict", json={"inputs": {"image": images.tolist()}})
    assert response.status_code == 200
    probabilities, label = reference(images)
    np.testing.assert_allclose(response.json()["outputs"]["probabilities"], probabilities, rtol=1e-5, atol=1e-7)
    assert response.json()["outputs"]["label"] == label.tolist()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", 400, "request body is empty"),
        (b"{not json", 400, "not valid JSON"),
        (b'{"inputs": [NaN]}', 400, "not valid JSON"),
        (b"[1, 2]", 400, 'must be a JSON object with an "inputs" field'),
        (b'{"input": []}', 400, '"inputs" field'),
        (b'{"inputs": []}', 400, "input 'image' is empty"),
        (b'{"inputs": [[1, 2, 3]]}', 400, "input 'image' has shape [1, 3]; expected [batch, 1, 8, 8]"),
        (b'{"inputs": {"images": []}}', 400, "missing ['image'], unknown ['images']"),
        (b'{"inputs": "seven"}', 400, "must hold float32 values, got strings"),
        (b'{"inputs": [[[1e39]]]}', 400, "input 'image'"),
        (b'{"inputs": [' + b"0," * 40000 + b"0]}", 413, "exceeds the limit of 65536 bytes"),
    ],
)
def test_bad_requests_get_a_json_error_naming_the_problem(client, body, status, message):
    response = client.post("/predict", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]
    assert "Traceback" not in response.text


def test_service_keeps_serving_after_bad_input(client, images):
    for _ in range(3):
        client.post("/predict", content=b"{broken")
    assert client.post("/predict", json={"inputs": images[0].tolist()}).status_code == 200


def test_health_and_metrics(client):
    assert client.get("/health/live").json()["status"] == "ready"
    assert client.get("/health/ready").status_code == 200
    client.post("/predict", content=b"{broken")
    metrics = client.get("/metrics").text
    assert 'inferpool_requests_total{route="/predict",status="400"}' in metrics
    assert 'inferpool_request_duration_seconds_bucket{le="5e-05",route="/predict"}' in metrics
    assert "inferpool_inference_seconds_count" in metrics
    assert 'inferpool_runtimes{model="digits",version=""} 2.0' in metrics
    assert 'inferpool_inflight_requests{model="digits",version=""} 0.0' in metrics


def test_unknown_route_is_a_json_404(client):
    response = client.get("/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found"}


def test_openapi_describes_the_model_input(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    image = body["properties"]["inputs"]["oneOf"][1]["properties"]["image"]
    assert image["oneOf"][0]["minItems"] == 1  # one sample: [1, 8, 8]
    assert image["oneOf"][0]["items"]["minItems"] == 8
    assert set(spec["paths"]["/predict"]["post"]["responses"]) >= {"200", "400", "413", "503"}
    assert client.get("/docs").status_code == 200


def test_non_finite_outputs_travel_as_null_as_the_spec_says(client):
    huge = np.full((1, 8, 8), 3.0e38).tolist()  # valid float32 in, overflow inside the model
    response = client.post("/predict", json={"inputs": huge})
    assert response.status_code == 200
    assert None in response.json()["outputs"]["probabilities"]
    spec = client.get("/openapi.json").json()
    outputs = spec["paths"]["/predict"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert outputs["properties"]["outputs"]["properties"]["probabilities"]["oneOf"][0]["items"] == {
        "type": ["number", "null"]
    }


def test_too_many_samples_in_one_request_is_a_400_naming_the_limit():
    with app_client("--runtime.max-request-samples", "4") as small:
        response = small.post("/predict", json={"inputs": np.zeros((5, 1, 8, 8)).tolist()})
        assert response.status_code == 400
        assert "carries 5 samples" in response.json()["error"]
        assert "at most 4 per request (max_request_samples)" in response.json()["error"]
        assert small.post("/predict", json={"inputs": np.zeros((4, 1, 8, 8)).tolist()}).status_code == 200
