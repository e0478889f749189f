"""The request priority and the response cache in the OpenAPI spec (docs/traffic.md): the
``X-Request-Priority`` and ``Cache-Control`` headers on every route whose request runs a model
(those that take ``X-Request-Timeout-Ms``: ``/predict``, v2 infer, ``/v1/embeddings`` and the
text routes), and v2's ``parameters.priority``, exactly as the front door takes them
(service/priorities.py, service/asked.py).

With one priority level (``priority_levels = 1``) the server reads neither the header nor the
parameter, so the spec takes any value there too.
"""

from __future__ import annotations

from typing import Any

from inferpool.config.traffic import PrioritySettings
from inferpool.service.priorities import Priorities

PRIORITY = "X-Request-Priority"
_ANY: dict[str, Any] = {"type": "string"}  # a header's every value
CACHE_CONTROL: dict[str, Any] = {
    "name": "Cache-Control",
    "in": "header",
    "required": False,
    "description": "`no-cache` or `no-store`: answered by the model, not from the response cache "
    "(response_cache_mb), and not kept in it. Any other value is ignored.",
    "schema": _ANY,
}
_SPACE = "[ \t]*"  # what the header may have around it (HTTP's optional whitespace)


def level_pattern(levels: int) -> str:
    """A regular expression of the header's values: 0 to ``levels`` in at most four digits."""
    alternatives = [f"0{{0,3}}[0-{min(levels, 9)}]"]
    if levels >= 10:
        alternatives.append(f"0{{0,2}}1[0-{levels - 10}]")
    return f"^{_SPACE}(?:{'|'.join(alternatives)}){_SPACE}$"


def priority_header(priorities: Priorities) -> dict[str, Any]:
    if not priorities.on:
        described = "Ignored: this server has one priority level (priority_levels = 1)."
        return {"name": PRIORITY, "in": "header", "required": False, "description": described, "schema": _ANY}
    return {
        "name": PRIORITY,
        "in": "header",
        "required": False,
        "description": f"This request's priority level: 1 (the highest) to {priorities.levels} (the lowest), or 0 "
        f"for the default ({priorities.default}). Under load the lowest level is refused first (503) and the "
        "highest runs first. A v2 request's parameters.priority wins over it. Anything else is a 400.",
        "schema": {"type": "string", "pattern": level_pattern(priorities.levels)},
    }


def priority_parameter(priorities: Priorities) -> dict[str, Any]:
    """v2's ``parameters.priority`` (Triton's)."""
    if not priorities.on:
        return {"description": "Triton's priority level. Ignored: this server has one (priority_levels = 1)."}
    return {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": priorities.levels,
        "description": f"Triton's priority level: 1 (the highest) to {priorities.levels} (the lowest), or 0 (or "
        f"null) for the default ({priorities.default}); it wins over the X-Request-Priority header. An integer "
        "as JSON Schema counts them: 2.0 is 2, 2.5 a 400.",
    }


def declare(spec: dict[str, Any], settings: PrioritySettings) -> None:
    """Both headers on each route that runs a model, the parameter in each v2 request body."""
    priorities = Priorities(settings.priority_levels, settings.default_priority)
    for operations in spec["paths"].values():
        for operation in operations.values():
            parameters = operation.get("parameters", [])
            names = {parameter["name"] for parameter in parameters}
            if "X-Request-Timeout-Ms" in names:
                if PRIORITY not in names:
                    parameters.append(priority_header(priorities))
                if CACHE_CONTROL["name"] not in names:
                    parameters.append(CACHE_CONTROL)
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        if name.startswith("V2InferRequest_"):
            schema["properties"]["parameters"]["properties"]["priority"] = priority_parameter(priorities)
