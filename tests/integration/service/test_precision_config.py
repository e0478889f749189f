"""int8 over HTTP: the gate's figures at /v2/models/{name}/config, answers as eager's labels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inferpool.config import load_settings
from inferpool.engine.zoo.digits import held_out_inputs
from tests.integration.service.conftest import app_client

pytest.importorskip("onnxruntime.quantization")


@pytest.fixture(scope="module")
def int8_client(tmp_path_factory):
    cache = tmp_path_factory.mktemp("int8-cache")
    args = ("--runtime.backend", "onnxruntime", "--runtime.precision", "int8", "--runtime.num-runtimes", "1")
    # Both named: int8 is served when one passes (fp32 measures faster on a model this small).
    methods = ("--runtime.int8-methods", '["dynamic", "static"]')
    with app_client(*args, *methods, "--runtime.compile-cache-dir", str(cache)) as client:
        yield client


def test_the_config_shows_every_candidates_gate_and_the_one_served(int8_client):
    selection = int8_client.get("/v2/models/digits/config").json()["precision_selection"]
    assert selection["configured"] == "int8"
    assert selection["served"] == "int8"
    assert [c["method"] for c in selection["candidates"]] == ["dynamic", "static"]
    assert selection["method"] in {c["method"] for c in selection["candidates"] if c["passed"]}
    figures = selection["gate"]["figures"]
    assert figures["items"] == 270
    assert figures["min_cosine"] is None
    assert figures["agreement"] >= 0.99
    assert 0 < figures["max_prob_diff"] < 0.5
    assert selection["gate"]["inputs"] == "the model's 360 held-out inputs (270 gated, 90 calibrating)"


def test_int8_answers_carry_eagers_labels(int8_client):
    from inferpool.engine.zoo.digits import build

    images = np.concatenate([batch["image"] for batch in held_out_inputs()[:40]])
    with torch.inference_mode():
        _, want = build().module(torch.from_numpy(images))
    answer = int8_client.post("/predict", json={"inputs": images.tolist()})
    assert answer.status_code == 200
    labels = answer.json()["outputs"]["label"]
    assert np.mean(np.asarray(labels) == want.numpy()) >= 0.95  # the gate's 99 %, on 40 of its images


def test_a_bad_accuracy_inputs_file_stops_start_up_saying_how_to_fix(tmp_path):
    bad = tmp_path / "held.jsonl"
    bad.write_text(json.dumps({"image": [0.0]}) + "\n{oops\n")
    args = ["--runtime.backend", "onnxruntime", "--runtime.precision", "int8", "--runtime.accuracy-inputs", str(bad)]
    fix = r"accuracy_inputs=.* is invalid: line 2 of .* is not JSON .*write one JSON object a line"
    with pytest.raises(ValueError, match=fix):
        load_settings(None, args)
