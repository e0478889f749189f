"""Each family's tiny folder, as each kind, against the reference implementations: the folder's
graph and handler (eager) against sentence-transformers' ``SentenceTransformer.encode`` and
``CrossEncoder.predict`` and transformers' classifier; then each family served on onnxruntime
(exported, checked against eager at load) answering as the reference does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inferpool.engine import InvalidInput, RuntimeOptions, ServedModel, TokenIds
from inferpool.engine.models.text.handlers import FolderHandler
from inferpool.engine.models.text.loading import load_folder
from inferpool.engine.models.text_api import TextInputs, TextPairs
from tests.support.hf_folders import (
    FAMILIES,
    KINDS,
    QUERY,
    TEXTS,
    classifier_logits,
    cross_encoder_logits,
    encode,
    softmax,
    write,
)

Build = Callable[[str, str], Path]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Build:
    root = tmp_path_factory.mktemp("folders")
    return cache(lambda family, kind: write(root, family, kind))


def run(path: Path, payload: object) -> dict[str, np.ndarray]:
    """The folder's handler and graph, eager, on one payload."""
    spec = load_folder(str(path))
    handler = spec.handler
    assert isinstance(handler, FolderHandler)
    arrays, context = handler.preprocess(payload)
    with torch.no_grad():
        out = spec.module(**{name: torch.from_numpy(value) for name, value in arrays.items()})
    return handler.postprocess({spec.output_names[0]: out.numpy()}, context)


def handler_of(path: Path) -> Any:
    return load_folder(str(path)).handler


def check(kind: str, path: Path, out: dict[str, np.ndarray], atol: float = 1e-5) -> None:
    """``out`` (the handler's answer to TEXTS, or to QUERY and TEXTS) is the reference's."""
    if kind == "embedder":
        np.testing.assert_allclose(out["embedding"], encode(path), atol=atol)
    elif kind == "cross-encoder":
        np.testing.assert_allclose(out["score"], cross_encoder_logits(path), atol=atol)
        assert np.argsort(-out["score"]).tolist() == np.argsort(-cross_encoder_logits(path)).tolist()
    else:
        np.testing.assert_allclose(out["logits"], classifier_logits(path), atol=atol)
        np.testing.assert_allclose(out["scores"], softmax(classifier_logits(path)), atol=atol)


def payload(kind: str) -> object:
    return {"query": QUERY, "texts": TEXTS} if kind == "cross-encoder" else TEXTS


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_matches_the_reference_eager(folder, family, kind):
    path = folder(family, kind)
    out = run(path, payload(kind))
    check(kind, path, out)
    assert out["tokens"].shape == (len(TEXTS),)
    assert (out["tokens"][out["truncated"]] == out["tokens"].max()).all()  # cut at the limit, as the reference


@pytest.mark.parametrize("family", FAMILIES)
def test_an_embedder_takes_prompts_and_offers_the_embedding_before_normalisation(folder, family):
    path = folder(family, "embedder")
    out = run(path, TextInputs(TEXTS, prompt_name="query"))
    np.testing.assert_allclose(out["embedding"], encode(path, "query"), atol=1e-5)
    norms = np.linalg.norm(out["unnormalized"], axis=1, keepdims=True)
    np.testing.assert_allclose(out["unnormalized"] / norms, out["embedding"], atol=1e-6)
    with pytest.raises(InvalidInput, match=r"prompt_name 'nope' is not one of the model's prompts \(document, "):
        run(path, TextInputs(TEXTS, prompt_name="nope"))


def test_a_cross_encoder_reads_rerank_pairs_and_truncates_the_text_not_the_query(folder):
    path = folder("bert", "cross-encoder")
    out = run(path, TextPairs(QUERY, TEXTS))
    np.testing.assert_allclose(out["score"], cross_encoder_logits(path), atol=1e-5)
    long = run(path, TextPairs(QUERY, ["word " * 400]))
    assert long["truncated"].tolist() == [True]
    with pytest.raises(InvalidInput, match="longer than the model's 128 tokens"):
        run(path, TextPairs(QUERY, ["word " * 400], truncate=False))
    with pytest.raises(InvalidInput, match="the query leaves no room"):
        run(path, TextPairs("word " * 400, ["a text"]))


def test_each_kind_declares_its_text_routes_and_tokenizes(folder):
    handlers = {kind: handler_of(folder("bert", kind)) for kind in KINDS}
    embedder, cross, classifier = (handlers[kind] for kind in KINDS)
    assert embedder.text_embedding.dimensions == 32
    assert embedder.text_embedding.prompts == (("document", ""), ("passage", "passage: "), ("query", "query: "))
    assert cross.text_rerank is not None
    assert (cross.text_embedding, cross.text_classification) == (None, None)
    assert classifier.text_classification.labels == ("negative", "neutral", "positive")
    tokens = embedder.text_tokenizer.tokenize(["Hi there"], add_special_tokens=True)[0]
    # A token's text is its span of the input, as TEI reports it (the vocabulary's "hi" is lowercased).
    assert [(t.text, t.special, t.start, t.stop) for t in tokens] == [
        ("[CLS]", True, None, None), ("Hi", False, 0, 2), ("there", False, 3, 8), ("[SEP]", True, None, None)
    ]  # fmt: skip
    ids = [t.id for t in tokens]
    from_ids, _ = embedder.preprocess(TokenIds([ids]))
    from_text, _ = embedder.preprocess(["Hi there"])
    np.testing.assert_array_equal(from_ids["input_ids"], from_text["input_ids"])


@pytest.mark.parametrize(
    ("kind", "bad", "message"),
    [
        ("cross-encoder", ["a", "b"], 'send {"query": "...", "texts"'),
        ("cross-encoder", {"query": "q", "texts": []}, "send texts as a non-empty"),
        ("cross-encoder", {"query": " ", "texts": ["a"]}, "the query is empty"),
        ("classifier", {"txt": "a"}, "got keys"),
        ("classifier", TextInputs(["a"], prompt_name="query"), "this model has no prompts"),
    ],
)
def test_bad_payloads_are_invalid_input(folder, kind, bad, message):
    handler = handler_of(folder("bert", kind))
    with pytest.raises(InvalidInput, match=message):
        handler.preprocess(bad)


SERVED = [(family, "embedder") for family in FAMILIES] + [("bert", "cross-encoder"), ("roberta", "classifier")]


@pytest.mark.parametrize(("family", "kind"), SERVED)
def test_served_on_onnxruntime_answers_as_the_reference(folder, tmp_path_factory, family, kind):
    path = folder(family, kind)
    cache_dir = str(tmp_path_factory.mktemp("cache"))
    options = RuntimeOptions(backend="onnxruntime", dispatch="threads", warmup_iters=1, compile_cache_dir=cache_dir)
    model = ServedModel.load(str(path), options)
    try:
        assert model.selection.name == "onnxruntime"
        assert model.name == path.name
        check(kind, path, asyncio.run(model.infer(payload(kind))).outputs, atol=1e-4)
    finally:
        model.close()


def test_the_int8_gate_judges_a_cross_encoder_on_reranks_of_its_held_out_texts(folder, tmp_path_factory):
    from inferpool.engine.models.text.loading import HELD_OUT_TEXTS, RERANK_TEXTS

    path = folder("bert", "cross-encoder")
    options = RuntimeOptions(backend="onnxruntime", precision="int8", dispatch="threads", warmup_iters=1,
                             compile_cache_dir=str(tmp_path_factory.mktemp("cache")))  # fmt: skip
    model = ServedModel.load(str(path), options)
    try:
        shown = model.info.precision_selection
        out = asyncio.run(model.infer(payload("cross-encoder"))).outputs
    finally:
        model.close()
    calls = -(-len(HELD_OUT_TEXTS) // RERANK_TEXTS)
    assert shown is not None
    assert shown["gate"]["figures"]["items"] == calls  # each call's scores judged as one vector
    assert shown["gate"]["inputs"] == f"the model's {calls} held-out inputs"
    assert shown["gate"]["figures"]["min_cosine"] > 0.99  # a tiny model's int8 passes (it may still measure slower)
    np.testing.assert_allclose(out["score"], cross_encoder_logits(path), atol=0.05)  # fp32 or int8: either is close
