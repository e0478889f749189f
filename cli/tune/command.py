"""``inferpool tune --p99-ms MS (--concurrency N | --rate R) [--budget 10m] [serve settings...]``

Find the serving settings that give the most throughput on *this* machine and model within a p99
latency objective: backend, processes, runtimes, intra-op threads, dispatch, batch size and
queue delay. In four steps, never past ``--budget``:

1. time the bare model call per backend, thread count and batch size here, once, and keep only
   the settings those costs say can help (cli/tune/space.py has the rules), best predicted first;
2. run each on a real ``inferpool serve`` under the workload (closed loop at ``--concurrency``
   clients or open loop at ``--rate`` requests/s, of the model's example or of ``--requests``,
   a JSONL file of POST /predict bodies), stopping a trial early once it cannot win;
3. measure the defaults again, as at the start: how far they drifted bounds the noise;
4. confirm: the two best settings of the trials against the defaults (serve with the settings
   given here, untuned), in interleaved rounds: each one's throughput ratio and whether the
   objective held; the winner is the one these rounds put furthest ahead (the best of single
   noisy trials reads high for having been picked); print every trial; write the winner's
   config (``--out``/tuned.toml, for ``inferpool serve --config``) only when the confirmation
   shows it ahead of the defaults beyond the measured noise, else say the
   defaults are the answer (cli/tune/decide.py); trials.json and a Pareto plot of throughput
   against p99 either way.

Trials and the confirmation measure alike (cli/tune/measure.py: same warm-up, the load generator
in the same place, off the servers' CPUs when there are 3 or more, its CPU time reported).

Exit status 0 when the answer met the objective, 1 when no setting did (the closest, with how
far it missed, is named, and written to closest.toml if the confirmation shows it ahead of the
defaults: cli/tune/rank.py says how it is chosen), 2 for invalid arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from inferpool.cli.argv import config_argument, refuse, settings_from_argv
from inferpool.cli.tune import lengths
from inferpool.cli.tune.budget import Budget, format_seconds, parse_duration
from inferpool.cli.tune.confirm import confirm_all, reserve, shortest
from inferpool.cli.tune.costs import CostMeter, Costs, batch_sizes, measure_costs
from inferpool.cli.tune.decide import Finalist, decide, met_objective, pick
from inferpool.cli.tune.measure import WARMUP, drift, pin_generator, placement
from inferpool.cli.tune.precision import int8_trial
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.rank import DEFAULTS
from inferpool.cli.tune.report import Outcome, confirmation_lines, format_table, verdict, write_results
from inferpool.cli.tune.space import Knobs, Load, build_space, calibrate, keep_backends, rerank
from inferpool.cli.tune.trials import Plan, Trial, Trials
from inferpool.config import Settings
from inferpool.engine import EngineError
from inferpool.engine.options import AUTO_CANDIDATES
from inferpool.engine.plan.threads import usable_cpus
from inferpool.harness.load import Workload
from inferpool.harness.payloads import JSON, Payload, json_request
from inferpool.service.models.host import sized

COSTS_SHARE = 0.2  # of the budget, at most, for timing the model here
MAX_BATCH = 64
DEFAULTS_AGAIN = "defaults@end"  # the defaults measured again after the search (not ranked)


def tune_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="inferpool tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    config_argument(parser)
    parser.add_argument("--p99-ms", type=float, required=True, help="the latency objective: p99 in milliseconds")
    workload = parser.add_mutually_exclusive_group(required=True)
    workload.add_argument("--concurrency", type=int, help="closed loop: clients, each sending again once answered")
    workload.add_argument("--rate", type=float, help="open loop: requests per second, on a fixed schedule")
    parser.add_argument("--requests", type=Path, help="JSONL: one POST /predict body per line, sent in turn")
    parser.add_argument("--inputs", help='JSON for {"inputs": ...} (instead of the model\'s example input)')
    parser.add_argument("--budget", default="10m", help="wall-clock limit, e.g. 10m, 90s, 1h (default 10m)")
    parser.add_argument("--trial-seconds", type=float, help="measured seconds per trial (default: budget/60, 2-10)")
    parser.add_argument("--out", type=Path, default=Path("inferpool-tune"), help="directory for the results")
    parser.add_argument(
        "--accuracy-cosine", type=float, metavar="C",
        help="also try int8 at the best setting, served only if every held-out output keeps cosine >= C to fp32",
    )  # fmt: skip
    args, rest = parser.parse_known_args(argv)
    try:
        seconds = parse_duration(args.budget)
    except ValueError as exc:
        parser.error(str(exc))
    budget = Budget(seconds)
    if args.p99_ms <= 0 or (args.concurrency or 1) < 1 or (args.rate or 1) <= 0:
        parser.error("--p99-ms, --concurrency and --rate must be positive")
    if args.accuracy_cosine is not None and not -1 <= args.accuracy_cosine <= 1:
        parser.error("--accuracy-cosine must be a cosine between -1 and 1, like 0.99")
    settings = settings_from_argv("inferpool tune", args, rest, sized)
    if isinstance(settings, int):
        return settings
    try:
        bodies = _bodies(args.requests, args.inputs)
    except (OSError, ValueError) as exc:
        refuse("inferpool tune", exc)
        return 2
    load = Load(args.p99_ms / 1e3, args.concurrency, args.rate)
    trial_seconds = args.trial_seconds or min(10.0, max(2.0, seconds / 60))  # the least, unless given
    serve_args = ([] if args.config is None else ["--config", str(args.config)]) + rest
    progress = Progress(budget)
    try:
        return _tune(
            settings,
            serve_args,
            load,
            bodies,
            budget,
            trial_seconds,
            args.out,
            progress,
            args.accuracy_cosine,
            lengthen=args.trial_seconds is None,
        )
    except (EngineError, RuntimeError, TimeoutError, ConnectionError) as exc:
        progress.say(f"inferpool tune: {exc}")
        return 2 if isinstance(exc, EngineError) else 1


def _bodies(path: Path | None, inputs: str | None) -> list[bytes] | None:
    """The request bodies to send (None: the model's example input)."""
    if inputs is not None:
        return [json_request(json.loads(inputs)).body]
    if path is None:
        return None
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    for number, line in enumerate(lines, 1):
        if not isinstance(json.loads(line), dict) or "inputs" not in json.loads(line):
            raise ValueError(f'{path}:{number}: each line must be a JSON object with "inputs", a POST /predict body')
    if not lines:
        raise ValueError(f"{path} has no request")
    return [line.encode() for line in lines]


def _tune(
    settings: Settings,
    serve_args: list[str],
    load: Load,
    bodies: list[bytes] | None,
    budget: Budget,
    trial_seconds: float,
    out: Path,
    progress: Progress,
    accuracy_cosine: float | None = None,
    lengthen: bool = False,
) -> int:
    options = settings.runtime
    first = None if bodies is None else json.loads(bodies[0])["inputs"]
    if settings.handler is not None and first is None:
        raise EngineError(f"the model has a handler ({settings.handler}): pass --requests or --inputs with its input")
    most = format_seconds(budget.seconds * COSTS_SHARE)
    progress.say(f"inferpool tune: timing {settings.model} here (at most {most})")
    meter = CostMeter(settings.model, options, settings.handler, first, usable_cpus())
    costs = _measure(meter, settings, load, budget)
    model = meter.module.name
    payloads = [Payload("/predict", b, (JSON,)) for b in bodies] if bodies else [_example(meter)]
    del meter
    workload = Workload(payloads, concurrency=load.concurrency, rate=load.rate)
    where = placement(sorted(os.sched_getaffinity(0)))
    pin_generator(where)
    progress.say(f"inferpool tune: {where.describe()}")
    plan = Plan(settings, serve_args, model, load, workload, WARMUP, trial_seconds, where, accuracy_cosine, lengthen)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="inferpool-tune-") as workdir:
        trials = Trials(plan, budget, progress, Path(workdir))
        budget.reserve = reserve(budget.seconds) + trials.again_seconds()
        try:
            return _search(trials, costs, settings, out, progress)
        finally:
            trials.close()


def _search(trials: Trials, costs: Costs, settings: Settings, out: Path, progress: Progress) -> int:
    budget, load = trials.budget, trials.plan.load
    defaults = Trial(DEFAULTS, Knobs.of(settings.runtime, settings.workers))
    shortest_trial = trials.plan.seconds
    if trials.plan.lengthen:
        lengths.for_defaults(trials)
    trials.run(defaults, DEFAULTS, defaults=True)
    if defaults.summary is None:
        raise RuntimeError(
            f"the defaults' server did not serve ({defaults.status}); raise --budget or fix the settings"
        )
    served = defaults.knobs.resolved(defaults.served)
    space = build_space(costs, load, 1 + len(settings.models), settings.runtime.oversubscribe, served)
    space = rerank(space, costs, load, calibrate(served, costs, load, defaults.summary.throughput))
    # Its throughput calibrated the model (inferpool.cli.tune.space.calibrate): no prediction of its own.
    progress.say(f"search: {len(space.candidates)} settings survive pruning, of a {space.grid}-point grid")
    for reason in space.reasons:
        progress.say(f"  {reason}")
    if trials.plan.lengthen:
        lengths.spread(trials, len(space.candidates), shortest_trial)
        progress.say(f"search: each trial measured for {trials.plan.seconds:g} s")
    not_run = passed = 0
    for number, candidate in enumerate(space.candidates, 1):
        trials.queued = len(space.candidates) - number
        if candidate.refines is not None and (trials.best is None or trials.best.knobs != candidate.refines):
            passed += 1  # a shorter queue delay for a batch setting that did not lead: it would not either
            continue
        trial = Trial(f"#{number}", candidate.knobs, round(candidate.predicted))
        if not trials.run(trial, f"trial {number}/{len(space.candidates)}"):
            not_run = len(space.candidates) - number + 1
            break
    int8_trial(trials, len(space.candidates) + 1)  # with --accuracy-cosine: inferpool.cli.tune.precision
    # The same server, the same way: how far it drifted (its share of the reserve kept for it).
    fits = budget.left() - trials.again_seconds() >= shortest()
    end = trials.again(defaults, DEFAULTS_AGAIN) if fits else None
    moved = None if end is None or end.summary is None else drift(defaults.summary, end.summary)
    confirmations = _confirm(trials, progress)
    trials.close()
    choice, confirmation = pick(trials.choice, confirmations)
    best = None if choice is None else choice.chosen
    decision = decide(choice, confirmation, moved)
    shown = choice if decision.confirmed else trials.choice  # the trials' own, unless confirmed otherwise
    print(format_table([*trials.done, *([end] if end else [])], shown))
    if passed:
        print(f"{passed} shorter queue delays not tried: their batch setting with the longer delay did not lead")
    if not_run:
        print(f"{not_run} of {len(space.candidates)} settings not run: the budget left could not hold them")
    print(verdict(shown, load))
    outcome = Outcome(decision, confirmation, end, moved, confirmations, shown)
    for line in confirmation_lines(outcome, load, trials.done[0], best):
        print(line)
    print(decision.reason)
    written = write_results(out, trials, costs, space.reasons, outcome, settings)
    print("\n".join(written))
    print(f"time used: {format_seconds(budget.used())} of the {format_seconds(budget.seconds)} budget")
    return 0 if met_objective(decision, choice, defaults, confirmation) else 1


def _confirm(trials: Trials, progress: Progress) -> list[Finalist]:
    """The finalists against the defaults (just the defaults against themselves when no other
    setting was measured: the ratio is then this machine's noise)."""
    defaults_port = trials.port(trials.done[0])
    finalists = trials.finalists or [trials.done[0]]
    if defaults_port is None or trials.choice is None:
        return []
    ports: list[tuple[Trial, int]] = []
    for finalist in finalists:
        # Starting a finalist's server again, when it was stopped, may take what the slices
        # would have had, but never what the shortest confirmation needs.
        port = trials.serve(finalist, trials.budget.left() - shortest())
        if port is not None:
            ports.append((finalist, port))
    if not ports:
        return []
    names = " and ".join(f.name for f, _ in ports)
    progress.say(f"confirmation: {names} against the defaults, interleaved")
    found = confirm_all(defaults_port, [p for _, p in ports], trials.plan.workload, trials.plan.load,
                        trials.budget, progress)  # fmt: skip
    return [Finalist(f, c) for (f, _), c in zip(ports, found, strict=False)]


def _measure(meter: CostMeter, settings: Settings, load: Load, budget: Budget) -> Costs:
    options = settings.runtime
    backends = list(options.auto_backends or AUTO_CANDIDATES)
    if options.backend != "auto" and options.backend not in backends:
        backends.append(options.backend)
    sizes = batch_sizes(min(MAX_BATCH, options.max_request_samples, load.outstanding))
    per_process = max(1, meter.costs.cpus // (1 + len(settings.models)))
    threads = [2**i for i in range(per_process.bit_length()) if 2**i <= per_process]
    deadline = time.monotonic() + budget.seconds * COSTS_SHARE
    return measure_costs(meter, backends, sizes, threads, deadline, keep_backends)


def _example(meter: CostMeter) -> Payload:
    examples = meter.module.example_inputs
    return json_request(next(iter(examples.values())) if len(examples) == 1 else dict(examples))


if __name__ == "__main__":
    sys.exit(tune_main(sys.argv[1:]))
