"""The model repository API, as Triton speaks it: index, load, unload.

A serving process cannot change the model set alone (every process must serve the same one),
so each call goes to the supervisor over the process's control channel
(inferpool.service.processes.supervisor_channel) and its answer comes back as is; a load or
unload answers once every process serves the new set.
The routes need the API key whenever one is set (inferpool.config.settings refuses to exempt them);
load and unload answer 403 unless model_control_mode is 'explicit'.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from inferpool.service.apierror import ApiError
from inferpool.service.errors import ERROR_RESPONSES, documented_error
from inferpool.service.http.codec import json_response
from inferpool.service.processes.supervisor_channel import Control, control_for

RESPONSES: dict[int | str, dict[str, Any]] = {
    400: documented_error("The model cannot be loaded (the reason says why); what served keeps serving."),
    403: documented_error("Model control is off: start the server with --model-control-mode explicit."),
    404: documented_error("This server has no model repository (--model-repository DIR)."),
    409: documented_error(
        "The model set would not fit the CPU budget (the message names the numbers and what to lower); "
        "what served keeps serving."
    ),
    500: documented_error("A new serving process did not start with the new models."),
    503: ERROR_RESPONSES[503],
}
router = APIRouter(prefix="/v2/repository", tags=["Model repository"], responses=RESPONSES)


def _control(request: Request, changes: bool) -> Control:
    return control_for(getattr(request.app.state, "control", None), changes)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}", "bad_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", "bad_json")
    return body


async def _ask(control: Control, request: dict[str, Any]) -> Response:
    answer = await control.ask(request)
    return json_response(answer["body"], answer["status"])


@router.post("/index", summary="Repository index")
async def index(request: Request) -> Response:
    """Every version in the repository: `READY`, or `UNAVAILABLE` with the `reason`
    (`{"ready": true}` in the body lists only the ready ones)."""
    control = _control(request, changes=False)
    body = await _body(request)
    return await _ask(control, {"op": "index", "ready": body.get("ready") is True})


@router.post("/models/{name}/load", summary="Load or reload a model")
async def load(request: Request, name: str) -> Response:
    """(Re)reads the model's folder and serves what its version policy selects, with no request
    lost: the new versions are loaded and warmed beside the old, then every serving process is
    replaced. `{"parameters": {"config": "<JSON>"}}` overrides the versions' config.toml."""
    control = _control(request, changes=True)
    body = await _body(request)
    return await _ask(control, {"op": "load", "name": name, "body": body})


@router.post("/models/{name}/unload", summary="Unload a model")
async def unload(request: Request, name: str) -> Response:
    """Stops serving every version of the model; requests in flight on it finish."""
    control = _control(request, changes=True)
    await _body(request)
    return await _ask(control, {"op": "unload", "name": name})
