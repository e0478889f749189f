"""Read a Dockerfile, and replay its build steps without a Docker engine.

``parse`` splits a Dockerfile into instructions (continuations joined, comments dropped).
``Replay`` executes the instructions the way a builder would, but on this machine: every
image path (WORKDIR, COPY destinations) is placed under a temporary root directory, COPY takes
files from the build context through ``.dockerignore``, RUN runs ``/bin/sh -c`` with the
stage's ARG and ENV values, and ENV values named in ``rooted`` (paths the RUN commands use,
such as VIRTUAL_ENV) are moved under the root too. It is a check of the Dockerfile's commands,
not a container: no isolation, no base image, no layers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the (joined) line
    line: int  # 1-based line of the keyword

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form RUN/CMD/ENTRYPOINT, or None for shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def parse(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comments (also inside continuations) and blank lines
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(part for part in pending if part)
        keyword, _, rest = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
        pending = []
    if pending:
        raise ValueError("Dockerfile ends inside a line continuation")
    return instructions


def healthcheck_command(instruction: Instruction) -> list[str] | str:
    """The command of ``HEALTHCHECK [options] CMD ...``: a list (exec form) or a shell string."""
    _, found, command = instruction.args.partition(" CMD ")
    if not found:
        raise ValueError(f"line {instruction.line}: HEALTHCHECK without CMD")
    form = Instruction("CMD", command.strip(), instruction.line).exec_form()
    return form if form is not None else command.strip()


_VAR = re.compile(r"\$(?:\{(?P<name>\w+)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<bare>\w+))")


def substitute(text: str, env: dict[str, str]) -> str:
    """Dockerfile variable substitution: $VAR, ${VAR}, ${VAR:-default}, ${VAR:+alternative}."""

    def one(match: re.Match[str]) -> str:
        name = match["name"] or match["bare"]
        value = env.get(name, "")
        if match["op"] == "-":
            return value or substitute(match["word"], env)
        if match["op"] == "+":
            return substitute(match["word"], env) if value else ""
        return value

    return _VAR.sub(one, text)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


@dataclass
class DockerIgnore:
    """The build context's .dockerignore, with Docker's semantics: patterns in order, the last
    match wins, ``!`` re-includes, and a pattern matching a parent directory matches its files."""

    patterns: list[tuple[bool, re.Pattern[str]]] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        patterns = []
        for raw in path.read_text().splitlines() if path.is_file() else []:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
            patterns.append((negate, _glob_regex(line)))
        return cls(patterns)

    def excluded(self, relative: str) -> bool:
        parts = relative.strip("/").split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        matched = False
        for negate, regex in self.patterns:
            if negate != matched:
                continue  # an inclusion of what is already excluded, or an exclusion of what is not
            if any(regex.fullmatch(candidate) for candidate in candidates):
                matched = not negate
        return matched


@dataclass
class Stage:
    name: str
    env: dict[str, str]
    args: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    skipped_runs: list[str] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)


class Replay:
    """Executes a parsed Dockerfile's build steps under ``root`` (see the module docstring).

    ``skip_run(stage, command)`` says which RUN commands not to execute (they are recorded in
    ``Stage.skipped_runs``), e.g. OS user creation that would change this machine.
    """

    def __init__(
        self,
        dockerfile: Path,
        context: Path,
        root: Path,
        *,
        base_env: dict[str, str],
        build_args: dict[str, str] | None = None,
        rooted: Iterable[str] = (),
        unset: Iterable[str] = (),
        skip_run: Callable[[Stage, str], bool] = lambda stage, command: False,
        run_timeout: float = 300.0,
        log: Path | None = None,
    ) -> None:
        self.instructions = parse(dockerfile.read_text())
        self.context = context
        self.root = root
        self.base_env = dict(base_env)
        self.build_args = dict(build_args or {})
        self.rooted = set(rooted)
        self.unset = set(unset)
        self.skip_run = skip_run
        self.run_timeout = run_timeout
        self.log = log
        self.ignore = DockerIgnore.read(context / ".dockerignore")
        self.stages: list[Stage] = []

    # -- paths ------------------------------------------------------------------------------
    def host_path(self, image_path: str, workdir: str = "/") -> Path:
        if image_path.startswith(str(self.root)):
            return Path(image_path)  # already placed under the root (a rooted ENV value)
        absolute = os.path.normpath(os.path.join(workdir, image_path))
        return self.root / absolute.lstrip("/")

    # -- the build --------------------------------------------------------------------------
    def build(self) -> Stage:
        global_args: dict[str, str] = {}
        stage: Stage | None = None
        for ins in self.instructions:
            if ins.keyword == "FROM":
                words = substitute(ins.args, global_args).split()
                name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(self.stages))
                stage = Stage(name, dict(self.base_env))
                self.stages.append(stage)
                continue
            if ins.keyword == "ARG":
                name, _, default = ins.args.partition("=")
                value = self.build_args.get(name, substitute(default.strip('"'), {**global_args}))
                if stage is None:
                    global_args[name] = value
                elif default or name in self.build_args:
                    stage.args[name] = value
                else:  # `ARG NAME` in a stage brings a global ARG's value into it
                    stage.args[name] = global_args.get(name, "")
                continue
            if stage is None:
                raise ValueError(f"line {ins.line}: {ins.keyword} before FROM")
            stage.instructions.append(ins)
            handler = getattr(self, f"_do_{ins.keyword.lower()}", None)
            if handler is not None:
                handler(stage, ins)
        if stage is None:
            raise ValueError("no FROM in the Dockerfile")
        return stage

    def _vars(self, stage: Stage) -> dict[str, str]:
        return {**stage.args, **stage.env}

    def _do_env(self, stage: Stage, ins: Instruction) -> None:
        before = self._vars(stage)
        for word in shlex.split(ins.args):
            name, sep, value = word.partition("=")
            if not sep:
                raise ValueError(f"line {ins.line}: use ENV NAME=value")
            if name in self.unset:
                stage.env.pop(name, None)
                continue
            value = substitute(value, before)
            if name in self.rooted and not value.startswith(str(self.root)):
                value = str(self.host_path(value))
            stage.env[name] = value

    def _do_workdir(self, stage: Stage, ins: Instruction) -> None:
        stage.workdir = os.path.normpath(os.path.join(stage.workdir, substitute(ins.args, self._vars(stage))))
        self.host_path(stage.workdir).mkdir(parents=True, exist_ok=True)

    def _do_copy(self, stage: Stage, ins: Instruction) -> None:
        words = shlex.split(substitute(ins.args, self._vars(stage)))
        source_stage = None
        while words and words[0].startswith("--"):
            flag = words.pop(0)
            if flag.startswith("--from="):
                source_stage = flag.removeprefix("--from=")
        *sources, dest = words
        dest_path = self.host_path(dest, stage.workdir)
        for source in sources:
            if source_stage is not None:
                src = self.host_path(source)  # every stage shares the one root
                if src.resolve() != dest_path.resolve():
                    self._copy_tree(src, dest_path, lambda rel: False)
                continue
            src = (self.context / source).resolve()
            if not src.is_relative_to(self.context.resolve()):
                raise ValueError(f"line {ins.line}: {source} is outside the build context")
            relative = src.relative_to(self.context.resolve()).as_posix()
            if self.ignore.excluded(relative):
                raise FileNotFoundError(f"line {ins.line}: {source} is excluded by .dockerignore")
            if src.is_dir():
                base = relative

                def excluded(rel: str, base: str = base) -> bool:
                    return self.ignore.excluded(f"{base}/{rel}")

                self._copy_tree(src, dest_path, excluded)
            else:
                target = dest_path / src.name if dest.endswith("/") or len(sources) > 1 else dest_path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)

    @staticmethod
    def _copy_tree(src: Path, dest: Path, excluded: Callable[[str], bool]) -> None:
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src).as_posix()
            if excluded(rel):
                continue
            target = dest / rel
            if path.is_dir() and not path.is_symlink():
                target.mkdir(parents=True, exist_ok=True)
            else:  # DockerIgnore.excluded also matched the parents: nothing under an excluded dir
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target, follow_symlinks=False)

    def _do_run(self, stage: Stage, ins: Instruction) -> None:
        form = ins.exec_form()
        command = form if form is not None else ["/bin/sh", "-c", ins.args]
        if self.skip_run(stage, ins.args):
            stage.skipped_runs.append(ins.args)
            return
        cwd = self.host_path(stage.workdir)
        cwd.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            command,
            cwd=cwd,
            env=self._vars(stage),
            capture_output=True,
            text=True,
            timeout=self.run_timeout,
            check=False,
        )
        if self.log is not None:
            with self.log.open("a") as sink:
                sink.write(f"$ {ins.args}\n{result.stdout}{result.stderr}\n")
        if result.returncode != 0:
            raise RuntimeError(
                f"line {ins.line}: RUN {ins.args} failed ({result.returncode}):\n"
                f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
