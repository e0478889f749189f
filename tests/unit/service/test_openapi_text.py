"""The spec's "not blank" pattern is the handlers' judgement, character by character, in both
regex dialects a validator may use (Python's, and ECMAScript's through the same escapes)."""

from __future__ import annotations

import re

from inferpool.engine.client import NOT_BLANK


def test_not_blank_matches_exactly_what_python_does_not_strip():
    pattern = re.compile(NOT_BLANK)
    for code in [*range(0x3100), 0xFEFF, 0x1F600]:
        char = chr(code)
        assert (pattern.search(char) is not None) == bool(char.strip()), hex(code)
    assert pattern.search(" \u001d\t") is None
    assert pattern.search("  a ") is not None


def test_its_escapes_are_ones_ecmascript_reads_alike():
    # No \s, \S, \w or \d (their sets differ between dialects): only \t, \r and \uXXXX.
    assert re.sub(r"\\t|\\r|\\u[0-9a-f]{4}", "", NOT_BLANK).count("\\") == 0
