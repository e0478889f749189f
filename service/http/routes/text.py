"""The text routes in other ecosystems' shapes: TEI's ``POST /embed``, ``/rerank`` and
``/tokenize``; Cohere's, Jina's and Infinity's ``POST /v1/rerank`` (and Cohere v2's path,
``/v2/rerank``); Infinity's ``POST /classify``. docs/routes.md describes each.

Each is a raw ASGI handler (service/http/fastpath.py) that decodes its API's body, picks the
model (service/http/text_models.py) and hands the handler's request type (text_api) to the one
front door, so every route has the same admission, deadlines, batching, metrics, traces and
logs as /predict; errors answer in the API's shape (service/apierror.py, ``ERROR_SHAPES``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive, Scope

from inferpool.engine.errors import InvalidInput
from inferpool.service.apierror import ApiError
from inferpool.service.frontdoor import FrontDoor
from inferpool.service.http import rerank_codec, tei_codec
from inferpool.service.http.body_fields import bad
from inferpool.service.http.fastpath import documentation_only
from inferpool.service.http.rawasgi import JSON, Answer, RawRoute
from inferpool.service.http.text_models import max_samples
from inferpool.service.http.text_route import TextApi, TextRoute
from inferpool.service.http.text_spec import OPERATIONS

router = APIRouter(tags=["Text: TEI, Cohere, Jina, Infinity"])


class Tokenize(TextRoute):
    """No model call: the handler's tokenizer runs here, on the event loop (it is fast)."""

    runs_model = False

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        body, _, _ = await self.body(scope, receive)
        request = tei_codec.parse_tokenize(body)
        model, tokenizer = self.choose(request, scope["path"])
        most = max_samples(self.door.host, model)
        if len(request.texts) > most:
            raise bad(
                f"'inputs' holds {len(request.texts)} texts; model {model.name!r} takes at most {most} per request "
                "(max_request_samples): split it",
                "inputs",
            )
        try:
            tokens = tokenizer.tokenize(request.texts, request.add_special_tokens)
        except InvalidInput as exc:
            raise ApiError(400, str(exc), exc.reason, param=self.api.field) from None
        return tei_codec.encode_tokens(tokens), JSON, []


def _no_model_call(*_: object) -> bytes:
    raise AssertionError("/tokenize answers without a model call (Tokenize.answer)")


def _pairs(request: Any) -> object:
    return request.pairs


def _inputs(request: Any) -> object:
    return request.inputs


APIS: dict[str, TextApi] = {
    "/embed": TextApi("embedding", "inputs", tei_codec.parse_embed, _inputs, tei_codec.encode_embed,
                      tei_codec.embed_for_model),
    "/rerank": TextApi("rerank", "texts", tei_codec.parse_rerank, _pairs, tei_codec.encode_rerank),
    "/tokenize": TextApi("tokenizer", "inputs", tei_codec.parse_tokenize, _inputs, _no_model_call),
    "/v1/rerank": TextApi("rerank", "documents", rerank_codec.parse_documents, _pairs, rerank_codec.encode_documents,
                          answers_id=True),
    "/classify": TextApi("classification", "input", rerank_codec.parse_classify, _inputs, rerank_codec.encode_classes,
                         answers_id=True),
}  # fmt: skip
"""Each text route's API, by path (/v2/rerank is /v1/rerank's, /v1/classify /classify's)."""


def raw_handlers(door: FrontDoor) -> dict[Any, RawRoute]:
    """Each documented endpoint's raw handler (app.state.hot_handlers)."""
    rerank, classifier = TextRoute(door, APIS["/v1/rerank"]), TextRoute(door, APIS["/classify"])
    return {
        embed: TextRoute(door, APIS["/embed"]),
        rerank_texts: TextRoute(door, APIS["/rerank"]),
        tokenize: Tokenize(door, APIS["/tokenize"]),
        rerank_v1: rerank,
        rerank_v2: rerank,
        classify: classifier,
        classify_v1: classifier,
    }


@router.post("/embed", summary="Embed texts, as TEI does", **OPERATIONS["/embed"])
async def embed(request: Request) -> Response:
    """TEI's `inputs` (a string or a list), `normalize`, `truncate`, `prompt_name`; plus `model`.
    Answers one list of floats per input."""
    documentation_only()


@router.post("/rerank", summary="Rank texts against a query, as TEI does", **OPERATIONS["/rerank"])
async def rerank_texts(request: Request) -> Response:
    """TEI's `query`, `texts`, `raw_scores`, `return_text`, `truncate`; plus `model`. Answers
    `[{index, score, text?}]`, best first."""
    documentation_only()


@router.post("/tokenize", summary="Tokenize texts, as TEI does", **OPERATIONS["/tokenize"])
async def tokenize(request: Request) -> Response:
    """TEI's `inputs` and `add_special_tokens`; plus `model`. Answers each input's tokens."""
    documentation_only()


@router.post("/v1/rerank", summary="Rerank documents, as Cohere, Jina and Infinity do", **OPERATIONS["/v1/rerank"])
async def rerank_v1(request: Request) -> Response:
    """`model`, `query`, `documents` (strings or `{"text": ...}`), `top_n`, `return_documents`.
    Answers Cohere's `{id, results: [{index, relevance_score, document?}], model, usage}`."""
    documentation_only()


@router.post("/v2/rerank", summary="Rerank documents, at Cohere v2's path", **OPERATIONS["/v2/rerank"])
async def rerank_v2(request: Request) -> Response:
    """The same as /v1/rerank, where Cohere's v2 client sends it; errors in Cohere's shape."""
    documentation_only()


@router.post("/classify", summary="Classify texts, as Infinity does", **OPERATIONS["/classify"])
async def classify(request: Request) -> Response:
    """Infinity's `model` and `input`; `raw_scores` for the logits. Answers each text's labels
    with their scores, best first."""
    documentation_only()


@router.post("/v1/classify", summary="Classify texts, at Infinity's /v1 prefix", **OPERATIONS["/v1/classify"])
async def classify_v1(request: Request) -> Response:
    """The same as /classify, where Infinity's clients send it under the `/v1` prefix."""
    documentation_only()
