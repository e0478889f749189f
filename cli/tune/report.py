"""What ``inferpool tune`` shows and keeps: the table of every trial, the Pareto plot of throughput
against p99 (a PNG, when matplotlib is installed: ``pip install 'inferpool[bench]'``) and the
verdict with the confirmation run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferpool.cli.tune.config import write_config
from inferpool.cli.tune.confirm import Confirmation
from inferpool.cli.tune.costs import Costs
from inferpool.cli.tune.decide import AGREEMENT, Decision, Finalist, agreement
from inferpool.cli.tune.measure import HUNGRY
from inferpool.cli.tune.rank import DEFAULTS, Choice, describe_miss, miss
from inferpool.cli.tune.space import Knobs, Load
from inferpool.cli.tune.trials import Trial, Trials
from inferpool.config import Settings
from inferpool.harness.load import Summary

COLUMNS = (
    f"{'trial':<13}{'backend':<22}{'procs':>5}{'rt':>4}{'thr':>4}  {'dispatch':<15}{'batch':>5}{'delay us':>9}"
    f"{'start s':>8}{'pred/s':>8}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'±':>6}{'errors':>7}  result"
)


def format_table(trials: Sequence[Trial], choice: Choice[Trial] | None = None) -> str:
    """One row a trial; ``±`` is its p99's noise (inferpool.cli.tune.rank.p99_noise); the chosen one is
    marked winner, or closest when none met the objective."""
    mark = "" if choice is None else "  <- winner" if choice.met else "  <- closest"
    return "\n".join([COLUMNS, *(_row(t) + (mark if choice and t is choice.chosen else "") for t in trials)])


def _precision(knobs: Knobs) -> str:
    return "" if knobs.precision in ("fp32", "auto") else f" {knobs.precision}"


def _row(trial: Trial) -> str:
    knobs, served, summary = trial.knobs, trial.served, trial.summary

    def chosen(configured: str, key: str) -> str:  # what ``auto`` turned into, where it was asked
        answer = served.get(key)
        return f"{configured}={answer}" if configured == "auto" and answer and answer != configured else configured

    runtimes = knobs.num_runtimes or served.get("runtimes", 0)
    delay = f"{knobs.max_queue_delay_us:g}" if knobs.max_batch_size > 1 else "-"
    start = "-" if trial.startup_seconds is None else f"{trial.startup_seconds:.1f}"
    predicted = "-" if trial.predicted is None else f"{trial.predicted:.0f}"
    if summary is None:
        measured = f"{'-':>8}{'-':>8}{'-':>8}{'-':>6}{'-':>7}"
    else:
        p50 = "-" if summary.p50_ms is None else f"{summary.p50_ms:.1f}"
        p99 = "-" if summary.p99_ms is None else f"{summary.p99_ms:.1f}"
        noise = "-" if trial.p99_noise_ms is None else f"{trial.p99_noise_ms:.1f}"
        measured = f"{summary.throughput:>8.0f}{p50:>8}{p99:>8}{noise:>6}{summary.errors:>7}"
    return (
        f"{trial.name:<13}{chosen(knobs.backend, 'backend') + _precision(knobs):<22}{knobs.workers:>5}{runtimes:>4}"
        f"{knobs.intra_op_threads:>4}  {chosen(knobs.dispatch, 'dispatch'):<15}{knobs.max_batch_size:>5}{delay:>9}"
        f"{start:>8}{predicted:>8}{measured}  {trial.status}"
    )


def frontier(trials: Sequence[Trial]) -> list[Trial]:
    """The measured trials that no other beats on both throughput and p99 (those stopped early
    count with what they showed before they were stopped)."""
    full = [t for t in trials if t.summary is not None and t.summary.p99_ms is not None]

    def beaten(t: Trial) -> bool:
        a = t.summary
        assert a is not None
        assert a.p99_ms is not None
        return any(
            o is not t and o.summary is not None and o.summary.p99_ms is not None
            and o.summary.throughput >= a.throughput and o.summary.p99_ms <= a.p99_ms
            and (o.summary.throughput > a.throughput or o.summary.p99_ms < a.p99_ms)
            for o in full
        )  # fmt: skip

    return sorted((t for t in full if not beaten(t)), key=lambda t: t.summary.throughput if t.summary else 0.0)


def _complete(trial: Trial) -> bool:
    """Measured for its whole time (not stopped early), with answers."""
    return trial.summary is not None and trial.summary.p99_ms is not None and trial.status in ("met", "missed")


def plot_pareto(trials: Sequence[Trial], load: Load, choice: Choice[Trial] | None, path: Path) -> str:
    """Write the plot; what to tell the user (where it is, or why there is none)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import ScalarFormatter
    except ImportError:
        return "no Pareto plot: matplotlib is not installed (pip install 'inferpool[bench]')"
    figure, axes = plt.subplots(figsize=(8, 5))
    for trial in trials:
        s = trial.summary
        if s is None or s.p99_ms is None:
            continue
        marker, color = "o" if _complete(trial) else "x", "tab:green" if trial.met else "tab:gray"
        axes.scatter([s.throughput], [s.p99_ms], marker=marker, color=color)
        axes.annotate(trial.name, (s.throughput, s.p99_ms), fontsize=7, xytext=(3, 3), textcoords="offset points")
    edge = frontier(trials)
    axes.plot([t.summary.throughput for t in edge if t.summary], [t.summary.p99_ms for t in edge if t.summary],
              color="tab:blue", label="Pareto frontier")  # fmt: skip
    axes.axhline(load.p99_seconds * 1e3, color="tab:red", linestyle="--", label="p99 objective")
    chosen = None if choice is None else choice.chosen.summary
    if choice is not None and chosen is not None:
        kind, color = ("winner", "tab:green") if choice.met else ("closest", "tab:orange")
        axes.scatter([chosen.throughput], [chosen.p99_ms], s=160, facecolors="none", edgecolors=color,
                     label=f"{kind} ({choice.chosen.name})")  # fmt: skip
    axes.set_xlabel("throughput (requests/s)")
    axes.set_ylabel("p99 latency (ms)")
    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.set_title("inferpool tune: every trial (x: stopped early)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return f"Pareto plot: {path}"


def verdict(choice: Choice[Trial] | None, load: Load) -> str:
    objective = f"p99 <= {load.p99_seconds * 1e3:g} ms"
    if choice is None:
        return f"no setting met {objective}, and no trial was measured"
    if choice.met and choice.chosen.summary is not None:
        s = choice.chosen.summary
        return f"winner: {choice.chosen.name} ({s.throughput:.0f} req/s, p99 {s.p99_ms:.1f} ms, {objective})"
    return f"no setting met {objective}; the closest: {choice.chosen.name} ({describe_miss(choice, load)})"


@dataclass(frozen=True)
class Outcome:
    """What the search ended with, beyond its trials."""

    decision: Decision
    confirmation: Confirmation | None
    again: Trial | None
    """The defaults measured again at the end of the search (None when the budget had no room)."""
    drift: float | None
    finalists: list[Finalist] = field(default_factory=list)
    """Every setting the confirmation measured against the defaults, ``confirmation``'s among them."""
    choice: Choice[Trial] | None = None
    """The setting decided on (inferpool.cli.tune.decide.pick); None: the trials' own choice."""


def confirmation_lines(outcome: Outcome, load: Load, defaults: Trial, best: Trial | None) -> list[str]:
    lines = _drift_lines(outcome, defaults)
    c, name = outcome.confirmation, "-" if best is None else best.name
    if c is None or best is None:
        return [*lines, "confirmation: skipped, too little of the budget was left"]
    if load.concurrency is not None:
        ratio = f"  throughput: {c.ratio:.2f}x the defaults'"
    else:  # every setting that keeps up answers the same rate: what differs is the latency
        ratio = f"  p99: the defaults' is {c.ratio:.2f}x the tuned one's"
    same = name == DEFAULTS
    note = ["  the defaults won, so both sides are the same server: the ratio is this machine's noise"] if same else []
    rounds = ", ".join(f"{r:.2f}" for r in c.round_ratios)
    pairs = ", ".join(f"{r:.2f}" for r in c.pair_ratios)
    lines += [
        f"confirmation, {c.rounds} interleaved rounds of {c.slice_seconds:g} s per side:",
        _side("defaults", c.defaults, c.defaults_held),
        _side("again" if same else f"tuned {name}", c.tuned, c.held),
        ratio,
        f"  each round: {rounds}; each pair of rounds: {pairs} (noise ±{c.noise:.2f})",
        f"  the load generator took {c.generator_cpus:.2f} CPU",
        *note,
    ]
    sides = [(DEFAULTS, agreement(defaults, c.defaults.throughput))]
    if not same:
        sides.append((name, agreement(best, c.tuned.throughput)))
    shown = [f"{n} {a:.2f}x" for n, a in sides if a is not None]
    if shown:
        off = any(a is not None and abs(a - 1) > AGREEMENT for _, a in sides)
        warn = f": more than {AGREEMENT:.0%} apart, the trials' ranking is within their noise" if off else ""
        lines.append(f"  confirmation over trial, throughput: {', '.join(shown)}{warn}")
    for other in outcome.finalists:
        if other.confirmation is not c:
            o = other.confirmation
            seen = agreement(other.trial, o.tuned.throughput)
            trial_ratio = "" if seen is None else f", {seen:.2f}x its trial"
            lines.append(f"  also measured: {other.trial.name} {o.ratio:.2f}x the defaults (noise ±{o.noise:.2f}), "
                         f"objective {'held' if o.held else 'missed'}{trial_ratio}")  # fmt: skip
    return lines


def _finalist(finalist: Finalist) -> dict[str, Any]:
    c, trial = finalist.confirmation, finalist.trial
    return {"name": trial.name, "ratio": round(c.ratio, 3), "noise": round(c.noise, 3), "held": c.held,
            "throughput": round(c.tuned.throughput, 1), "over_trial": agreement(trial, c.tuned.throughput)}  # fmt: skip


def _drift_lines(outcome: Outcome, defaults: Trial) -> list[str]:
    lines = []
    again = outcome.again
    if again is not None and again.summary is not None and defaults.summary is not None:
        lines.append(
            f"defaults at the start and the end of the search: {defaults.summary.throughput:.0f} and "
            f"{again.summary.throughput:.0f} req/s (drift {outcome.drift or 0:.0%})"
        )
    shares = [t.generator_cpus for t in (defaults, again) if t is not None and t.generator_cpus is not None]
    if shares and max(shares) > HUNGRY:
        lines.append(f"the load generator took up to {max(shares):.2f} CPU while measuring: on a machine it shares "
                     "with the servers, every figure here is the servers' and the generator's together")  # fmt: skip
    return lines


def _side(label: str, summary: Summary, held: bool) -> str:
    return (f"  {label:<12} {summary.throughput:8.0f} req/s  p99 {summary.p99_ms or 0:8.1f} ms  "
            f"{summary.errors} errors  objective {'held' if held else 'missed'}")  # fmt: skip


def write_results(
    out: Path, trials: Trials, costs: Costs, reasons: list[str], outcome: Outcome, settings: Settings
) -> list[str]:
    """The Pareto plot, the confirmed setting's config (tuned.toml, or closest.toml when none met
    the objective; none when the defaults are the answer) and trials.json; a line on each."""
    load, choice, decision = trials.plan.load, outcome.choice or trials.choice, outcome.decision
    best = None if choice is None else choice.chosen
    chosen = best if choice is not None and choice.met else None
    written = [plot_pareto(trials.done, load, choice, out / "pareto.png")]
    config = None
    if decision.confirmed and best is not None:
        config = out / ("tuned.toml" if chosen is not None else "closest.toml")
        comment = (f"inferpool tune: {verdict(choice, load)}\n{decision.reason}\n"
                   f"workload: {load.describe()}; serve with: inferpool serve --config {config}")  # fmt: skip
        written.append(f"config: {write_config(config, settings, best.knobs, comment)}")
    else:
        written.append("no config written: the defaults are the answer (serve with the settings given here)")
    report: dict[str, Any] = {
        "objective_p99_ms": load.p99_seconds * 1e3,
        "workload": load.describe(),
        "costs_us": {f"{b} x{t} b{s}": round(v * 1e6, 1) for (b, t, s), v in sorted(costs.calls.items())},
        "gil_share": costs.gil_share,
        "pruned": reasons,
        "placement": asdict(trials.plan.placement),
        "trials": [asdict(t) for t in trials.done],
        "defaults_again": None if outcome.again is None else asdict(outcome.again),
        "drift": outcome.drift,
        "winner": None if chosen is None else chosen.name,  # the trials' (inferpool.cli.tune.rank)
        "closest": None if chosen is not None or best is None else best.name,
        "closest_miss": None
        if chosen is not None or best is None or best.summary is None
        else round(miss(best.summary, load), 3),  # p99 over the objective's (inferpool.cli.tune.rank.miss)
        "confirmation": None if outcome.confirmation is None else asdict(outcome.confirmation),
        "finalists": [_finalist(f) for f in outcome.finalists],
        "answer": decision.answer,
        "confirmed": decision.confirmed,
        "bar": round(decision.bar, 3),
        "reason": decision.reason,
        "config": None if config is None else str(config),
        "seconds_used": round(trials.budget.used(), 1),
        "budget_seconds": trials.budget.seconds,
    }
    (out / "trials.json").write_text(json.dumps(report, indent=1))
    return [*written, f"every trial: {out / 'trials.json'}"]
