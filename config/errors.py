"""Configuration errors as people read them: one line each, naming the setting and the fix."""

from __future__ import annotations

from pydantic import ValidationError

_PREFIXES = ("Value error, ", "Assertion failed, ")


def error_lines(exc: Exception) -> list[str]:
    """One line per problem. pydantic's own rendering spends three lines on each (the type
    code, the whole input object, a documentation URL); the setting's name, what is wrong
    and, for a scalar, the value given are what a person needs."""
    if not isinstance(exc, ValidationError):
        return [str(exc)]
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        for prefix in _PREFIXES:
            message = message.removeprefix(prefix)
        given = error.get("input")
        if isinstance(given, str | int | float | bool) and repr(given) not in message:
            message += f" (got {given!r})"
        lines.append(f"{where}: {message}" if where and not message.startswith(where) else message)
    return lines
