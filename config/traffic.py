"""The settings of the response cache and of request priorities (fields of the one settings
class, config/settings.py, declared here to keep that file short), and their checks."""

from __future__ import annotations

from typing import Annotated, Protocol, TypeVar

from pydantic import Field

ResponseCacheMb = Annotated[
    float,
    Field(
        ge=0,
        description="Megabytes of answers each serving process keeps to answer a repeated request (same model, "
        "version, route, inputs and parameters) with the same bytes, before admission and without the model; "
        "kept at once (a cheap model's, under 2 ms a call: from its second sighting), least recently used evicted "
        "first. 0 = the cache is off (no request pays "
        "for it). A request with 'Cache-Control: no-cache' skips it.",
    ),
]
ResponseCacheModels = Annotated[
    list[str] | None,
    Field(
        description="With response_cache_mb > 0: the model names whose answers are cached; unset = every "
        "model. [] turns the cache off for every model.",
    ),
]
PriorityLevels = Annotated[
    int,
    Field(
        ge=1,
        le=16,
        description="Request priority levels, 1 the highest (Triton's v2 'priority' parameter, the "
        "X-Request-Priority header). Under load the door and each model's queue refuse the lowest level "
        "first and the batcher takes the highest first. 1 = priorities off (every request alike).",
    ),
]
DefaultPriority = Annotated[
    int,
    Field(
        ge=1,
        description="The level of a request that names none (or sends priority 0); at most priority_levels.",
    ),
]


class PrioritySettings(Protocol):
    priority_levels: int
    default_priority: int


S = TypeVar("S", bound=PrioritySettings)


def check_priorities(settings: S) -> S:
    if settings.default_priority > settings.priority_levels:
        raise ValueError(
            f"default_priority {settings.default_priority} is not a level: priority_levels is "
            f"{settings.priority_levels}, so give default_priority between 1 (the highest) and "
            f"{settings.priority_levels}, or raise priority_levels"
        )
    return settings
