"""A user's own project, outside the repository, served the way the README says: its modules named
like InferPool's old top-level packages (config.py, engine/, service.py, cli.py) clash with nothing,
``--model mymodels:build`` imports from the current directory, and an installed InferPool puts
one import name, ``inferpool``, into site-packages."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from inferpool.harness.server import REPO_ROOT, inferpool_serve, launch

FACTORY = """
import torch

import cli
import config  # the user's config.py, not InferPool's settings
import engine
import service
from inferpool.engine import ModelSpec


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * config.SCALE


def build() -> ModelSpec:
    assert (engine.WHO, service.WHO, cli.WHO) == ("user engine", "user service", "user cli")
    return ModelSpec(module=Scale(), example_inputs={"x": torch.zeros(1, 4)}, output_names=("y",), name="scale")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("userproj")
    (folder / "config.py").write_text(
        "SCALE = 3.0\n\n\nclass Settings:  # the name InferPool's config exports\n    pass\n"
    )
    (folder / "engine").mkdir()
    (folder / "engine" / "__init__.py").write_text('WHO = "user engine"\n')
    (folder / "service.py").write_text('WHO = "user service"\n')
    (folder / "cli.py").write_text('WHO = "user cli"\n')
    (folder / "mymodels.py").write_text(textwrap.dedent(FACTORY))
    return folder


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with InferPool installed from a wheel of this checkout (not editable); its
    dependencies come from the test venv's site-packages through a .pth line (a path a .pth adds
    is not a site dir, so the test venv's editable-install hook does not come along)."""
    root = tmp_path_factory.mktemp("fresh")
    wheels = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), "."],
        cwd=REPO_ROOT,
        check=True,
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "test-venv-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = wheels.glob("inferpool-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True
    )
    return venv


def _served(program: str, project: Path, *args: str) -> Iterator[httpx2.Response]:
    # PYTHONPATH empty: nothing of the checkout on the path, as for a user who pip-installed InferPool.
    command = inferpool_serve(
        "--model", "mymodels:build", "--workers", "1", "--runtime.backend", "eager", *args, program=(program,)
    )
    with launch(command, cwd=project, env={"PYTHONPATH": ""}, ready_timeout=120) as server:
        yield httpx2.post(f"{server.url}/predict", json={"inputs": [1, 2, 3, 4]}, timeout=30)


def _assert_scaled_by_the_users_config(answer: httpx2.Response) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"]["y"] == pytest.approx([3.0, 6.0, 9.0, 12.0])


def test_serve_imports_the_users_modules_from_the_current_directory(project: Path):
    program = str(Path(sys.executable).with_name("inferpool"))
    for answer in _served(program, project):
        _assert_scaled_by_the_users_config(answer)


def test_an_installed_inferpool_serves_the_project_and_installs_no_generic_names(project: Path, fresh_venv: Path):
    python = fresh_venv / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import inferpool.engine; print(inferpool.engine.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=fresh_venv,
    ).stdout
    assert str(fresh_venv) in where  # the wheel's copy, not the checkout's
    for name in ("config", "engine", "service", "cli", "harness"):
        imported = subprocess.run([python, "-c", f"import {name}"], capture_output=True, text=True, cwd=fresh_venv)
        assert imported.returncode != 0, name
        assert "No module named" in imported.stderr, (name, imported.stderr)
    for answer in _served(str(fresh_venv / "bin" / "inferpool"), project):
        _assert_scaled_by_the_users_config(answer)


def test_app_dir_points_at_the_project_from_elsewhere(project: Path, tmp_path: Path):
    program = str(Path(sys.executable).with_name("inferpool"))
    command = inferpool_serve(
        "--model",
        "mymodels:build",
        "--workers",
        "1",
        "--runtime.backend",
        "eager",
        "--app-dir",
        str(project),
        program=(program,),
    )
    with launch(command, cwd=tmp_path, env={"PYTHONPATH": ""}, ready_timeout=120) as server:
        _assert_scaled_by_the_users_config(httpx2.post(f"{server.url}/predict", json={"inputs": [1, 2, 3, 4]}))


def test_a_missing_module_says_where_it_was_looked_for(tmp_path: Path):
    program = str(Path(sys.executable).with_name("inferpool"))
    done = subprocess.run(
        [program, "serve", "--model", "mymodels:build", "--grpc-port", "0", "--port", "0"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "'mymodels' is looked up in the app dir (--app-dir" in done.stderr
