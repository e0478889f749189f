"""The backend serving each model, and the table ``auto`` chose it from, over HTTP."""

from __future__ import annotations

import pytest

from tests.integration.service.conftest import app_client, metric_total

# auto compiles every candidate, torchscript included, and re-raises the winner's warnings:
# which one wins is measured, so its deprecation warning may or may not come.
pytestmark = pytest.mark.filterwarnings("ignore:backend 'torchscript' runs TorchScript:FutureWarning")


@pytest.fixture(scope="module")
def auto_client():
    args = ("--runtime.backend", "auto", "--runtime.auto-backends", '["eager", "torchscript"]')
    with app_client(*args, "--runtime.num-runtimes", "1") as client:
        yield client


def test_config_route_names_the_chosen_backend_and_its_table(auto_client):
    config = auto_client.get("/v2/models/digits/config").json()
    selection = config["backend_selection"]
    scores = {row["backend"]: row["score_us"] for row in selection["candidates"]}
    assert selection["configured"] == "auto"
    assert list(scores) == ["eager", "torchscript"]
    assert all(score > 0 for score in scores.values())
    assert config["backend"] == selection["chosen"] == min(scores, key=scores.__getitem__)
    assert config["max_batch_size"] == 1
    assert auto_client.get("/v2/models/digits/versions/1/config").json() == config


def test_build_info_and_answers_come_from_the_chosen_backend(auto_client):
    chosen = auto_client.get("/v2/models/digits/config").json()["backend"]
    metrics = auto_client.get("/metrics").text
    assert metric_total(metrics, "inferpool_build_info", backend=chosen, model="digits") == 1
    answer = auto_client.post("/predict", json={"inputs": [[[0.0] * 8] * 8]})
    assert answer.status_code == 200
    assert len(answer.json()["outputs"]["probabilities"]) == 10


def test_config_of_an_unknown_model_is_404(auto_client):
    assert auto_client.get("/v2/models/nope/config").status_code == 404
