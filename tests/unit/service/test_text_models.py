"""Which served model a text route uses (service/http/text_models.py), and how the spec narrows
each text route to the served models of its kind (service/http/text_spec.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from inferpool.engine.client import Handler, Schema, TensorSpec, TextClassification, TextEmbedding, TextRerank
from inferpool.service.apierror import ApiError
from inferpool.service.http import text_spec
from inferpool.service.http.openapi_schemas import Served
from inferpool.service.http.text_models import routes_of, text_model


class _Handler(Handler):
    def preprocess(self, payload: object) -> Any:
        raise NotImplementedError

    def postprocess(self, outputs: Any, context: object) -> Any:
        raise NotImplementedError


def handler(**declared: object) -> Handler:
    made = _Handler()
    for name, value in declared.items():
        setattr(made, name, value)
    return made


@dataclass
class Model:
    name: str
    handler: Handler | None = None
    info: Any = field(init=False)

    def __post_init__(self) -> None:
        self.info = SimpleNamespace(handler=self.handler)


class Host:
    def __init__(self, *models: Model) -> None:
        self.models = {m.name: m for m in models}

    def serving(self) -> Model:
        return next(iter(self.models.values()))

    def served(self) -> list[tuple[Model, Any]]:
        return [(m, SimpleNamespace(options=SimpleNamespace(max_request_samples=8))) for m in self.models.values()]

    def get(self, name: str) -> Model:
        if name not in self.models:
            raise ApiError(404, "no", "unknown_model")
        return self.models[name]


def served_by(*models: Model) -> Any:
    """A stand-in for the ModelHost (what text_models asks of it)."""
    return Host(*models)


EMBED: Any = Model("embedder", handler(text_embedding=TextEmbedding(4), text_tokenizer=object()))
RERANK: Any = Model("reranker", handler(text_rerank=TextRerank()))
RERANK_2: Any = Model("reranker-2", handler(text_rerank=TextRerank()))
CLASSIFY: Any = Model("classifier", handler(text_classification=TextClassification(("a", "b"))))
DIGITS: Any = Model("digits")


def test_a_model_serves_the_routes_its_handler_declares():
    assert routes_of(EMBED) == ["/v1/embeddings", "/embed", "/tokenize"]
    assert routes_of(RERANK) == ["/rerank", "/v1/rerank", "/v2/rerank"]
    assert routes_of(DIGITS) == []


def test_no_name_takes_the_one_model_of_the_kind():
    host = served_by(DIGITS, EMBED, RERANK, CLASSIFY)
    assert text_model(host, "rerank", None, "/rerank")[0] is RERANK
    model, declared = text_model(host, "classification", None, "/classify")
    assert (model, declared.labels) == (CLASSIFY, ("a", "b"))


def test_several_of_the_kind_need_a_name():
    host = served_by(RERANK, RERANK_2)
    with pytest.raises(ApiError, match=r"several reranking models are served \(reranker, reranker-2\)") as caught:
        text_model(host, "rerank", None, "/rerank")
    assert (caught.value.status, caught.value.param) == (400, "model")
    assert text_model(host, "rerank", "reranker-2", "/rerank")[0] is RERANK_2


def test_none_of_the_kind_names_what_is_served():
    with pytest.raises(ApiError, match="the text routes served are embedder: /v1/embeddings, /embed, /tokenize"):
        text_model(served_by(DIGITS, EMBED), "rerank", None, "/rerank")
    with pytest.raises(ApiError, match="no served model takes text routes"):
        text_model(served_by(DIGITS), "classification", None, "/classify")


def test_a_named_model_of_another_kind_is_a_400_naming_its_routes():
    host = served_by(DIGITS, EMBED, RERANK)
    with pytest.raises(ApiError, match="it serves /v1/embeddings, /embed, /tokenize") as caught:
        text_model(host, "rerank", "embedder", "/v1/rerank")
    assert caught.value.status == 400
    with pytest.raises(ApiError, match="it takes /predict/digits and v2 only"):
        text_model(host, "rerank", "digits", "/rerank")
    with pytest.raises(ApiError, match=r"reranking models served are \['reranker'\]") as caught:
        text_model(host, "rerank", "nope", "/rerank")
    assert caught.value.status == 404


def _spec() -> dict[str, Any]:
    return {"paths": {path: {"post": {"responses": {"422": {}}, **op["openapi_extra"]}} for path, op in
                      text_spec.OPERATIONS.items()}}  # fmt: skip


def _served(model: Model, floor: int = 1) -> Served:
    schema = Schema((TensorSpec("x", "float32", (None,)),), (TensorSpec("y", "float32", (None,)),))
    return Served(model.name, schema, model.handler, 8, floor)


def test_the_spec_keeps_only_the_routes_served_and_narrows_them():
    spec = _spec()
    embedder: Any = Model(
        "e", handler(text_embedding=TextEmbedding(4, prompts=(("q", "q: "),)), text_tokenizer=object())
    )
    text_spec.describe(spec, [_served(embedder, 3), _served(RERANK), _served(RERANK_2)], lambda floor: {"floor": floor})
    assert sorted(spec["paths"]) == ["/embed", "/rerank", "/tokenize", "/v1/rerank", "/v2/rerank"]
    embed = spec["paths"]["/embed"]["post"]
    properties = embed["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert properties["model"] == {"enum": ["e", None]}
    assert properties["prompt_name"] == {"enum": ["q", None]}
    assert properties["normalize"] == {"enum": [True, None]}  # no unnormalized output served
    assert properties["inputs"]["oneOf"][1]["maxItems"] == 8
    assert embed["parameters"] == [{"floor": 3}]
    assert "422" not in embed["responses"]
    rerank = spec["paths"]["/v1/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "model" in rerank["required"]
    assert rerank["properties"]["model"] == {"enum": ["reranker", "reranker-2"]}
    assert "parameters" not in spec["paths"]["/tokenize"]["post"]  # no model call: no deadline


def test_the_error_answers_are_documented_in_each_apis_shape():
    assert text_spec.error_response("/embed", "x")["content"]["application/json"]["schema"]["required"] == [
        "error",
        "error_type",
    ]
    assert text_spec.error_response("/v2/rerank", "x")["content"]["application/json"]["schema"]["required"] == [
        "message"
    ]
    assert "properties" in text_spec.error_response("/predict", "x")["content"]["application/json"]["schema"]
