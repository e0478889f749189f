"""One trial of ``inferpool tune``: a real ``inferpool serve`` on a free port (inferpool.harness.server) with
one point of the search space, loaded by the packaged load generator (inferpool.harness.load), stopped early
once it cannot win, never started unless it can finish within the budget.

A trial stops early when (after MIN_SAMPLES answers and a quarter of its time):
- more than 1 % of its answers failed;
- once a trial has met the objective: more answers were slower than the objective than 1 % of
  all it will answer (x TAIL_MARGIN), so its p99 can no longer come under it, whatever the rest
  of the run does. While none has met, a trial that misses runs to its end: the closest is
  ranked on whole trials (inferpool.cli.tune.rank), and a quarter of one is too noisy to rank on (the
  confirmation contradicted it: docs/BENCHMARKS.md, "inferpool tune (issue 20)");
- in a closed loop, its throughput so far, even WIN_MARGIN higher, is below the best trial's
  that met the objective.
The servers of the defaults and of the finalists so far (the two best trials:
inferpool.cli.tune.rank.finalists) stay up (idle) for the confirmation run; when the ranking
moves back to a trial whose server was stopped (among trials that missed, a new lowest p99 can
make an earlier one the closest), ``serve`` starts it again, within the budget.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferpool.cli.tune.budget import Budget
from inferpool.cli.tune.config import write_config
from inferpool.cli.tune.confirm import FINALISTS, OVERHEAD, slice_seconds
from inferpool.cli.tune.measure import SHARED, Placement, measure, slices
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.rank import DEFAULTS, Choice, choose, finalists, p99_noise
from inferpool.cli.tune.space import Knobs, Load
from inferpool.config import Settings
from inferpool.harness.load import Summary, Window, Workload
from inferpool.harness.server import Command, inferpool_serve, launch

SERVE = (sys.executable, "-m", "inferpool.cli.main")  # this interpreter's InferPool, whatever is on PATH
TRIAL_FLAGS = ("--grpc-port", "0")  # trials serve HTTP only, several servers at once
STOP_SECONDS = 2.0  # stopping an idle trial server
STOP_TIMEOUT = 5.0
MIN_SAMPLES = 100
TAIL_MARGIN = 1.25
WIN_MARGIN = 0.15
MIN_MEASURE = 1.0  # a trial with less measuring time left than this is not started


@dataclass
class Trial:
    name: str
    knobs: Knobs
    predicted: float | None = None
    status: str = "not run"
    met: bool = False
    summary: Summary | None = None
    startup_seconds: float | None = None
    p99_noise_ms: float | None = None
    """Half the spread of the p99s of consecutive parts of its answers (inferpool.cli.tune.rank)."""
    served: dict[str, Any] = field(default_factory=dict)
    """What the server says it runs (GET /v2/models/{name}/config): ``auto``'s choices."""
    generator_cpus: float | None = None
    """The load generator's CPU share while measuring (inferpool.cli.tune.measure)."""


@dataclass(frozen=True)
class Plan:
    settings: Settings
    serve_args: list[str]  # the defaults: serve's own config and flags, as given
    model: str  # the model's name in /v2 URLs
    load: Load
    workload: Workload
    warmup: float
    seconds: float
    placement: Placement = SHARED
    accuracy_cosine: float | None = None
    """``--accuracy-cosine``: search int8 too, at this gate (inferpool.cli.tune.precision)."""
    lengthen: bool = False
    """``seconds`` is the least: trials are measured as long as the budget lets (inferpool.cli.tune.lengths)."""


class Trials:
    """Runs trials in order within the budget; ``best`` is the one chosen so far."""

    def __init__(self, plan: Plan, budget: Budget, progress: Progress, workdir: Path) -> None:
        self.plan, self.budget, self.progress, self.workdir = plan, budget, progress, workdir
        self.done: list[Trial] = []
        self.startups: list[float] = []
        self.servers: dict[str, tuple[ExitStack, int]] = {}  # trial name -> (its server's stack, port)
        self.queued = 0
        """Trials waiting after the current one (set by the caller), for the ETA."""

    @property
    def choice(self) -> Choice[Trial] | None:
        return choose(self.done, self.plan.load)

    @property
    def best(self) -> Trial | None:
        """The winner so far, or the closest while none met the objective."""
        choice = self.choice
        return None if choice is None else choice.chosen

    def estimate(self) -> float:
        """Seconds a trial takes, start to stop: the slowest start-up seen (the defaults' when
        nothing else has started yet), its slices' warm-ups and measuring, stopping."""
        return self.startup() + self.measuring(self.plan.seconds) + STOP_SECONDS

    def startup(self) -> float:
        """Seconds a trial's server takes to start: the slowest of the last three (30 before any)."""
        return max(self.startups[-3:], default=30.0)

    @property
    def slice(self) -> float:
        """A trial's slice: the confirmation's own (inferpool.cli.tune.measure says why)."""
        return slice_seconds(self.budget.seconds)

    def measuring(self, seconds: float) -> float:
        """Seconds that measuring ``seconds`` takes, each slice's warm-up and set-up included."""
        return seconds + slices(seconds, self.slice) * (self.plan.warmup + OVERHEAD)

    def fitting(self, left: float) -> float:
        """The measured seconds, at most the plan's, whose measuring fits in ``left``: whole
        slices dropped first, then one shorter slice."""
        seconds = self.plan.seconds
        while self.measuring(seconds) > left and seconds > self.slice:
            seconds = (slices(seconds, self.slice) - 1) * self.slice
        if self.measuring(seconds) > left:
            seconds = left - self.plan.warmup - OVERHEAD
        return seconds

    def run(self, trial: Trial, order: str, defaults: bool = False) -> bool:
        """Run ``trial``; False when the budget cannot hold it (nothing later will fit either)."""
        if not defaults and not self.budget.fits(self.estimate()):
            trial.status = "not run: budget"
            return False
        plan = self.plan
        command = self._command(trial)
        self.progress.update(f"{order} starting {label(trial.knobs)}", self.eta(self.estimate()))
        ready = self.budget.for_trials() - self.measuring(MIN_MEASURE) - STOP_SECONDS
        stack, started = ExitStack(), time.monotonic()
        try:
            server = stack.enter_context(
                launch(command, name=f"tune-{trial.name}", ready_timeout=max(1.0, ready), stop_timeout=STOP_TIMEOUT,
                       cpus=plan.placement.servers)
            )  # fmt: skip
        except (RuntimeError, TimeoutError) as exc:  # refused its settings, crashed, or too slow to start
            trial.status = "failed: " + _first_line(exc)
            self.done.append(trial)
            return True
        trial.startup_seconds = round(time.monotonic() - started, 1)
        self.startups.append(trial.startup_seconds)
        seconds = self.fitting(self.budget.for_trials() - STOP_SECONDS)
        if seconds < MIN_MEASURE and not defaults:  # it started slower than any before it
            stack.close()
            trial.status = "not run: budget"
            return False
        try:
            trial.served = served_config(server.port, plan.model)
            self._measure(trial, server.port, max(seconds, MIN_MEASURE), order)
        except OSError as exc:  # the server went away under load (its log has why)
            trial.status = "failed: " + _first_line(exc)
        finally:
            self.done.append(trial)
            self._keep_or_stop(trial, stack, server.port)
        return True

    def _command(self, trial: Trial) -> Command:
        """The defaults' serve command as given, or a config written for ``trial``'s knobs (each
        trial's server is started from the file, so the one written for the winner served)."""
        if trial.name == DEFAULTS:
            return inferpool_serve(*self.plan.serve_args, *TRIAL_FLAGS, program=SERVE)
        config = write_config(self.workdir / f"{trial.name}.toml", self.plan.settings, trial.knobs)
        return inferpool_serve("--config", str(config), *trial.knobs.flags(), *TRIAL_FLAGS, program=SERVE)

    def _measure(self, trial: Trial, port: int, seconds: float, order: str, compete: bool = True) -> None:
        """``compete``: stopped early once it cannot win; else only on errors (a repeat, which
        must be as long as its first run to be compared with it)."""
        plan, stopped = self.plan, [""]

        def check(window: Window) -> bool:
            best = self.best.summary if compete and self.best is not None and self.best.met else None
            stopped[0] = early_stop(window, seconds, plan.load, best)
            eta = self.eta(seconds - window.elapsed() + STOP_SECONDS)
            self.progress.update(f"{order} {label(trial.knobs)}: {_brief(window.summary())}", eta)
            return bool(stopped[0])

        measured = measure(port, plan.workload, seconds, check, plan.warmup, self.slice)
        summary = trial.summary = measured.summary
        trial.generator_cpus = measured.generator_cpus
        trial.p99_noise_ms = p99_noise(measured.window.latencies)
        trial.met = not stopped[0] and plan.load.met_by(summary)
        trial.status = f"stopped: {stopped[0]}" if stopped[0] else "met" if trial.met else "missed"
        self.progress.say(f"{order} {label(trial.knobs)}: {_brief(summary)} -> {trial.status}")

    def again(self, trial: Trial, name: str) -> Trial | None:
        """``trial`` measured once more on its kept server, the same way, as ``name`` (the
        defaults at the end of the search: how far they drifted); None without its server."""
        port = self.port(trial)
        if port is None:
            return None
        repeat = Trial(name, trial.knobs, served=trial.served, startup_seconds=trial.startup_seconds)
        self.progress.update(f"{name}: {label(trial.knobs)} again", self.eta(self.again_seconds()))
        try:
            self._measure(repeat, port, self.plan.seconds, name, compete=False)
        except OSError as exc:
            repeat.status = "failed: " + _first_line(exc)
        return repeat

    def again_seconds(self) -> float:
        """What ``again`` takes: the server is up, so no start-up."""
        return self.measuring(self.plan.seconds) + 1.0

    def eta(self, current: float = 0.0) -> float:
        """Seconds to the end: the current trial's ``current``, the queued trials the budget
        holds, the confirmation run."""
        after = max(0.0, self.budget.for_trials() - current)
        trials = min(self.queued, int(after // self.estimate()))
        return min(self.budget.left(), current + trials * self.estimate() + self.budget.reserve)

    @property
    def finalists(self) -> list[Trial]:
        """The settings the confirmation measures against the defaults (inferpool.cli.tune.rank)."""
        return finalists(self.done, self.plan.load, FINALISTS)

    def _keep_or_stop(self, trial: Trial, stack: ExitStack, port: int) -> None:
        """Keep the servers of the defaults and of the finalists so far; stop the others."""
        self.servers[trial.name] = (stack, port)
        kept = {DEFAULTS, *(t.name for t in self.finalists)}
        for name in list(self.servers):
            if name not in kept:
                self.stop(name)

    def port(self, trial: Trial) -> int | None:
        kept = self.servers.get(trial.name)
        return None if kept is None else kept[1]

    def serve(self, trial: Trial, within: float) -> int | None:
        """``trial``'s server's port: the one kept, or a new one ready within ``within`` seconds
        (None if it is not, or ``within`` is too short to try)."""
        port = self.port(trial)
        if port is not None or within < MIN_MEASURE:
            return port
        self.progress.say(f"starting {trial.name} again for the confirmation")
        stack = ExitStack()
        try:
            server = stack.enter_context(
                launch(self._command(trial), name=f"tune-{trial.name}", ready_timeout=within,
                       stop_timeout=STOP_TIMEOUT, cpus=self.plan.placement.servers)
            )  # fmt: skip
        except (RuntimeError, TimeoutError) as exc:
            self.progress.say(f"{trial.name} did not start again: {_first_line(exc)}")
            return None
        self.servers[trial.name] = (stack, server.port)
        return server.port

    def stop(self, name: str) -> None:
        kept = self.servers.pop(name, None)
        if kept is not None:
            kept[0].close()

    def close(self) -> None:
        """Stop every server still up, at once: each drains and exits on its own."""
        with ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            list(pool.map(self.stop, list(self.servers)))


def early_stop(window: Window, seconds: float, load: Load, best: Summary | None) -> str:
    """Why a trial measured for ``seconds`` cannot win, from its ``window`` so far, or "" (see
    the module docstring); ``best`` is the best trial's that met the objective, if any."""
    summary = window.summary()
    answers = summary.ok + summary.errors
    if answers < MIN_SAMPLES or window.elapsed() < seconds / 4:
        return ""
    if summary.errors > 0.01 * answers:
        return "errors"
    if best is not None and window.over(load.p99_seconds) > 0.01 * summary.throughput * seconds * TAIL_MARGIN:
        return "p99 above objective"
    if load.concurrency is not None and best is not None and summary.throughput * (1 + WIN_MARGIN) < best.throughput:
        return "cannot win"
    return ""


def served_config(port: int, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/config", timeout=10) as answer:
        facts: dict[str, Any] = json.loads(answer.read())
    return facts


def label(knobs: Knobs) -> str:
    delay = f" {knobs.max_queue_delay_us:g}us" if knobs.max_batch_size > 1 else ""
    precision = "" if knobs.precision in ("fp32", "auto") else f" {knobs.precision}>={knobs.accuracy_min_cosine:g}"
    return (f"{knobs.backend} x{knobs.workers}p x{knobs.num_runtimes}r x{knobs.intra_op_threads}t "
            f"{knobs.dispatch} b{knobs.max_batch_size}{delay}{precision}")  # fmt: skip


def _brief(summary: Summary) -> str:
    p99 = "-" if summary.p99_ms is None else f"{summary.p99_ms:.1f}"
    return f"{summary.throughput:.0f} req/s, p99 {p99} ms, {summary.errors} errors"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
