"""``import inferpool.config`` stays light (issue 56): the CLI, the supervisor and every front end
read their settings before any model loads, so the settings and the options they check load no
torch, no numpy and none of the engine's request path, plan or executors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HEAVY = (
    "torch",
    "numpy",
    "inferpool.engine.executors",
    "inferpool.engine.serving.served",
    "inferpool.engine.models.sources",
)


def loaded_by(statement: str) -> set[str]:
    # A fresh interpreter: this one has torch loaded by the test session already.
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(found.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import inferpool.config",
        "from inferpool.config import load_settings",
        "from inferpool.engine.options import RuntimeOptions",
        "from inferpool.engine import BACKENDS, DEFAULT_MODEL, RuntimeOptions",
    ],
)
def test_the_settings_and_options_load_no_torch_and_no_engine_machinery(statement):
    loaded = loaded_by(statement)
    assert [name for name in HEAVY if name in loaded] == []


def test_the_options_do_not_import_the_executors_that_import_them():
    # options -> executors -> pipeline -> ... -> options was a 14-module import circle; the
    # names the options check (DISPATCH_MODES) live in a module that imports nothing of the engine.
    loaded = loaded_by("import inferpool.engine.options")
    assert not {name for name in loaded if name.startswith("inferpool.engine.executors")}
