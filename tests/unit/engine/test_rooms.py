"""The engine is kept in rooms (issue 56): the request path (engine/serving/), the start-up
measurements and plan (engine/plan/), models and their sources (engine/models/), beside the
backends, the executors and the zoo; its root holds only what every room shares."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[3] / "engine"
MAX_ROOT_MODULES = 15


def test_the_engines_root_stays_small():
    root = sorted(p.name for p in ENGINE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at engine/'s root, put new ones in a room: {root}"


def test_every_room_is_a_package_that_imports_nothing_itself():
    # Importing one module of a room must load only what that module needs (the config imports
    # engine.models.source_kinds and engine.plan.dispatch_modes, which must stay torch-free).
    for room in ("serving", "plan", "models"):
        body = ast.parse((ENGINE / room / "__init__.py").read_text()).body
        assert ast.get_docstring(ast.Module(body=body, type_ignores=[])), room
        assert len(body) == 1, f"engine/{room}/__init__.py holds more than its docstring"
