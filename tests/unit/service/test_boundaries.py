"""The service's boundary with the engine, enforced (#35): service/ talks to the engine through
``inferpool.engine.client`` and ``inferpool.engine.errors`` only (service/ruff.toml bans the
rest, and ``make check`` runs ruff), and neither those nor the app's modules import torch."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import inferpool.engine

ROOT = Path(__file__).resolve().parents[3]
FRONT = (
    "inferpool.engine.client",
    "inferpool.engine.errors",
    "inferpool.service.app",
    "inferpool.service.frontdoor",
    "inferpool.service.http.routes.predict",
    "inferpool.service.http.routes.v2",
    "inferpool.service.http.routes.openai",
    "inferpool.service.grpc.servicer",
)


@pytest.mark.parametrize("module", FRONT)
def test_importing_a_front_end_module_loads_no_torch(module):
    # A fresh interpreter: this one has torch loaded by the test session already.
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert found.stdout.strip() == "[]", f"import {module} loaded torch: {found.stdout}"


def test_the_service_lint_bans_every_engine_module_but_the_client_and_errors():
    rules = tomllib.loads((ROOT / "service" / "ruff.toml").read_text())
    banned = set(rules["lint"]["flake8-tidy-imports"]["banned-api"])
    modules = {p.stem for p in (ROOT / "engine").iterdir() if p.name != "__pycache__" and p.stem != "__init__"}
    wanted = {f"inferpool.engine.{m}" for m in modules - {"client", "errors"}}
    face = {f"inferpool.engine.{name}" for name in inferpool.engine.__all__}
    assert wanted | face | {"torch"} <= banned, sorted((wanted | face) - banned)
    assert "inferpool.engine.client" not in banned
    assert "inferpool.engine.errors" not in banned


def test_the_lint_exemptions_name_files_that_exist():
    # A stale path exempts nothing today and, once a file takes its place, a module nobody chose to.
    rules = tomllib.loads((ROOT / "service" / "ruff.toml").read_text())
    exempt = rules["lint"]["per-file-ignores"]
    assert exempt, "service/ruff.toml exempts the model loaders"
    assert [path for path in exempt if not (ROOT / "service" / path).is_file()] == []


@pytest.mark.parametrize("room", ["", "http", "processes", "models"])
def test_ruff_refuses_a_service_module_that_imports_the_engine_face(room):
    # In every room too: ruff takes the nearest config, service/ruff.toml, for its sub-folders.
    probe = ROOT / "service" / room / "_boundary_probe.py"
    probe.write_text("from inferpool.engine import ServedModel\n\nprint(ServedModel)\n")
    try:
        ruff = Path(sys.executable).with_name("ruff")
        found = subprocess.run([str(ruff), "check", "--no-cache", str(probe)], capture_output=True, text=True, cwd=ROOT)
    finally:
        probe.unlink()
    assert found.returncode == 1
    assert "TID251" in found.stdout
