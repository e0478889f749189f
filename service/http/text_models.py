"""Which served model a text route uses, and what the routes a model serves are.

A handler declares what its text model does (inferpool.engine.models.text_api): each kind is a
family of routes. The rule (docs/routes.md, "Which model a text route uses"):

- a request that names a model (``model``: every text route takes it, an extension on TEI's)
  gets that model; a name not served is a 404, and a model that does not do what the route does
  (rerank on an embedder) a 400 naming the routes it serves;
- a request that names none gets the one served model of the route's kind; if several are
  served, a 400 listing their names; if none, a 400 naming the routes the served models serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferpool.engine.client import EngineClient
from inferpool.service.apierror import ApiError

if TYPE_CHECKING:  # the host loads models (torch); a front end only asks it for them
    from inferpool.service.models.host import ModelHost


@dataclass(frozen=True, slots=True)
class TextKind:
    attribute: str
    """The handler's attribute declaring it (engine/models/handlers.py, text_api)."""
    noun: str
    plural: str
    routes: tuple[str, ...]


KINDS: dict[str, TextKind] = {
    "embedding": TextKind(
        "text_embedding", "text-embedding model", "text-embedding models", ("/v1/embeddings", "/embed")
    ),
    "rerank": TextKind(
        "text_rerank", "reranking model (cross-encoder)", "reranking models", ("/rerank", "/v1/rerank", "/v2/rerank")
    ),
    "classification": TextKind(
        "text_classification", "text classifier", "text classifiers", ("/classify", "/v1/classify")
    ),
    "tokenizer": TextKind("text_tokenizer", "model with a tokenizer", "models with a tokenizer", ("/tokenize",)),
}


def declared(model: EngineClient, kind: str) -> Any:
    """What ``model``'s handler declares for ``kind`` (None: it does not do that)."""
    handler = model.info.handler
    return None if handler is None else getattr(handler, KINDS[kind].attribute, None)


def routes_of(model: EngineClient) -> list[str]:
    """The text routes ``model`` serves, by what its handler declares."""
    return [route for kind, text in KINDS.items() if declared(model, kind) is not None for route in text.routes]


def of_kind(host: ModelHost, kind: str) -> list[EngineClient]:
    """The served models (each name's latest version) of ``kind``; 503 while not serving."""
    host.serving()
    return [model for model, _ in host.served() if declared(model, kind) is not None]


def text_model(host: ModelHost, kind: str, name: str | None, route: str) -> tuple[EngineClient, Any]:
    """The model ``route`` uses for a request naming ``name`` (None: none), and its declaration."""
    text = KINDS[kind]
    candidates = of_kind(host, kind)
    if name is None:
        if not candidates:
            raise _wrong(f"no {text.noun} is served, so {route} has none to use; {_served_routes(host)}")
        if len(candidates) > 1:
            names = [m.name for m in candidates]
            raise _wrong(f"several {text.plural} are served ({', '.join(names)}): name one in 'model'")
        name = candidates[0].name  # looked up by name below: the request's logs and metrics then carry it
    try:
        model = host.get(name)
    except ApiError:
        names = [m.name for m in candidates]
        raise ApiError(
            404, f"the model {name!r} does not exist here; the {text.plural} served are {names}", "unknown_model",
            param="model",
        ) from None  # fmt: skip
    found = declared(model, kind)
    if found is None:
        serves = routes_of(model)
        does = f"it serves {', '.join(serves)}" if serves else f"it takes /predict/{model.name} and v2 only"
        raise _wrong(f"model {name!r} is not a {text.noun}, so {route} cannot use it; {does}")
    return model, found


def max_samples(host: ModelHost, model: EngineClient) -> int:
    """The most samples (texts) ``model`` takes in one request (max_request_samples)."""
    return next((plan.options.max_request_samples for m, plan in host.served() if m is model), 1)


def _served_routes(host: ModelHost) -> str:
    served = [(model.name, routes_of(model)) for model, _ in host.served()]
    listed = [f"{name}: {', '.join(routes)}" for name, routes in served if routes]
    return "the text routes served are " + "; ".join(listed) if listed else "no served model takes text routes"


def _wrong(message: str) -> ApiError:
    return ApiError(400, message, "invalid_input", param="model")
