"""schemathesis hooks for the fuzz test (loaded by the CLI through SCHEMATHESIS_HOOKS).

What the spec says in words because JSON Schema cannot (the binary extension's header is the
JSON's length), and a check that keeps the 503/504 allowance in schemathesis.toml narrow.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import MutableMapping
from typing import Any

import schemathesis
from schemathesis import Case, GenerationMode
from schemathesis.core.transport import Response

HEADER_LENGTH = "Inference-Header-Content-Length"
SHORT_MS = 1000.0  # a deadline the server may fail to meet: a 503 or 504 is then its right answer


@schemathesis.hook
def before_call(context: Any, case: Case, kwargs: dict[str, Any]) -> None:
    """In a valid request the binary extension's header is the JSON's byte length: with an
    all-JSON body, the body's (the requests transport sends ``json.dumps`` of it)."""
    mode = case.meta.generation.mode if case.meta is not None else None
    headers: MutableMapping[str, Any] = case.headers
    if mode is GenerationMode.POSITIVE and HEADER_LENGTH in headers and isinstance(case.body, dict | list):
        headers[HEADER_LENGTH] = str(len(json.dumps(case.body).encode()))


def _deadline_ms(case: Case) -> float | None:
    """The deadline the request asked for, in ms, from the header or the v2 parameter (µs)."""
    given: list[float] = []
    header = case.headers.get("X-Request-Timeout-Ms")
    if header is not None:
        with contextlib.suppress(ValueError):
            given.append(float(header))
    parameters = case.body.get("parameters") if isinstance(case.body, dict) else None
    timeout_us = parameters.get("timeout") if isinstance(parameters, dict) else None
    if isinstance(timeout_us, int | float):
        given.append(timeout_us / 1e3)
    return min(given) if given else None


@schemathesis.check
def deadline_is_the_only_5xx(ctx: Any, response: Response, case: Case) -> bool | None:
    """503 and 504 only for a request that asked for a deadline too short to meet: the
    server's documented answers to it (README: deadlines). Anything else is a server error."""
    if response.status_code in (503, 504):
        deadline = _deadline_ms(case)
        if deadline is None or deadline >= SHORT_MS:
            raise AssertionError(f"{response.status_code} to a request without a short deadline: {response.text}")
    return None


def _message(response: Response) -> str:
    """An error answer's message, whichever API's shape it is in (service/apierror.py)."""
    try:
        body = json.loads(response.text)
    except ValueError:
        return response.text
    error = body.get("error", body.get("message")) if isinstance(body, dict) else None
    return str(error.get("message") if isinstance(error, dict) else error)


@schemathesis.check
def token_limit_is_the_only_valid_400(ctx: Any, response: Response, case: Case) -> bool | None:
    """A schema-valid body refused 400 only for a text over the model's token limit (the spec
    cannot count tokens: schemathesis.toml lets these routes' valid bodies have that 400)."""
    mode = case.meta.generation.mode if case.meta is not None else None
    if response.status_code == 400 and mode is GenerationMode.POSITIVE and "tokens" not in _message(response):
        raise AssertionError(f"400 to a schema-valid body, not about a token limit: {response.text}")
    return None
