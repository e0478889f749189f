"""Hugging Face folders against the real server, with no handler and no model config: an
embedder given as ``--model <folder>``, and a cross-encoder, a classifier and the packaged MiniLM
folder copied under another name as ``[[models]]`` sources written relative to the config file;
each answering /predict, v2 and (MiniLM) OpenAI's client as the reference implementations do
(sentence-transformers, transformers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2
import numpy as np
import openai
import pytest

from inferpool.harness.server import run_server, wait_ready
from tests.support import hf_folders as reference
from tests.support.hf_folders import QUERY, TEXTS
from tests.support.minilm_reference import SENTENCES, cosines, token_ids

MINILM_COPY = "my-minilm"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from inferpool.engine.zoo.minilm import model_dir

    root = tmp_path_factory.mktemp("models")
    shutil.copytree(model_dir(), root / MINILM_COPY)
    return {kind: reference.write(root, family, kind) for family, kind in
            [("bert", "embedder"), ("bert", "cross-encoder"), ("distilbert", "classifier")]}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory, folders):
    config = folders["embedder"].parent / "serve.toml"
    config.write_text(
        f'[[models]]\nsource = "{folders["cross-encoder"].name}"\n\n'
        f'[[models]]\nsource = "{folders["classifier"].name}"\nname = "sentiment"\n\n'
        f'[[models]]\nsource = "{MINILM_COPY}"\n[models.runtime]\nbackend = "onnxruntime"\n'
    )
    args = ("--config", str(config), "--model", str(folders["embedder"]), "--grpc-port", "0")
    with run_server(tmp_path_factory.mktemp("logs"), *args, ready_timeout=300) as running:
        wait_ready(running, 300)
        yield running


def predict(server, name: str, inputs: object) -> dict:
    answer = httpx2.post(f"{server.url}/predict/{name}", json={"inputs": inputs}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["outputs"]


def v2(server, name: str, inputs: list[dict]) -> dict[str, dict]:
    answer = httpx2.post(f"{server.url}/v2/models/{name}/infer", json={"inputs": inputs}, timeout=60)
    assert answer.status_code == 200, answer.text
    return {output["name"]: output for output in answer.json()["outputs"]}


def text_tensor(name: str, texts: list[str]) -> dict:
    return {"name": name, "datatype": "BYTES", "shape": [len(texts)], "data": texts}


def test_an_embedder_folder_answers_as_sentence_transformers(server, folders):
    name = folders["embedder"].name
    out = predict(server, name, TEXTS)
    np.testing.assert_allclose(out["embedding"], reference.encode(folders["embedder"]), atol=1e-4)
    assert len(out["tokens"]) == len(TEXTS)
    one = predict(server, name, TEXTS[1])
    np.testing.assert_allclose(one["embedding"], reference.encode(folders["embedder"])[1], atol=1e-4)
    outputs = v2(server, name, [text_tensor("text", TEXTS)])
    assert outputs["embedding"]["shape"] == [len(TEXTS), 32]
    got = np.reshape(outputs["embedding"]["data"], (-1, 32))
    np.testing.assert_allclose(got, reference.encode(folders["embedder"]), atol=1e-4)


def test_a_cross_encoder_folder_scores_pairs_as_cross_encoder_predict(server, folders):
    name, want = folders["cross-encoder"].name, reference.cross_encoder_logits(folders["cross-encoder"])
    out = predict(server, name, {"query": QUERY, "texts": TEXTS})
    np.testing.assert_allclose(out["score"], want, atol=1e-4)
    assert np.argsort(out["score"]).tolist() == np.argsort(want).tolist()
    outputs = v2(server, name, [text_tensor("query", [QUERY]), text_tensor("text", TEXTS)])
    np.testing.assert_allclose(outputs["score"]["data"], want, atol=1e-4)


def test_a_classifier_folder_gives_logits_and_scores(server, folders):
    want = reference.classifier_logits(folders["classifier"])
    out = predict(server, "sentiment", TEXTS)
    np.testing.assert_allclose(out["logits"], want, atol=1e-4)
    np.testing.assert_allclose(out["scores"], reference.softmax(want), atol=1e-4)
    outputs = v2(server, "sentiment", [text_tensor("text", TEXTS)])
    assert outputs["scores"]["shape"] == [len(TEXTS), 3]


@pytest.mark.parametrize(
    ("kind", "inputs", "message"),
    [
        ("cross-encoder", ["just", "texts"], 'send {\\"query\\"'),
        ("cross-encoder", {"query": "q", "texts": []}, "texts"),
        ("embedder", "  ", "the text is empty"),
    ],
)
def test_bad_input_is_a_400_naming_the_problem(server, folders, kind, inputs, message):
    answer = httpx2.post(f"{server.url}/predict/{folders[kind].name}", json={"inputs": inputs}, timeout=30)
    assert answer.status_code == 400, answer.text
    assert message in answer.text


def test_v2_metadata_describes_each_kinds_tensors(server, folders):
    meta = httpx2.get(f"{server.url}/v2/models/{folders['cross-encoder'].name}", timeout=10).json()
    assert [i["name"] for i in meta["inputs"]] == ["query", "text"]
    assert [o["name"] for o in meta["outputs"]] == ["score", "truncated", "tokens"]


def test_the_packaged_minilm_copied_as_a_folder_answers_openais_client_as_sentence_transformers(server):
    from tests.support.minilm_reference import reference as minilm_reference

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        answer = client.embeddings.create(model=MINILM_COPY, input=SENTENCES, encoding_format="float")
    got = np.asarray([item.embedding for item in answer.data])
    assert cosines(got, minilm_reference()).min() >= 0.999
    assert answer.usage.prompt_tokens == sum(len(ids) for ids in token_ids(SENTENCES))
