"""``dispatch = "auto"``: run a model's calls inline on the event loop or on worker threads,
chosen from what this machine measures for the chosen backend's call at startup.

A worker thread pays for itself only with the part of a call that runs *without the GIL*: only
then can the event loop (HTTP, JSON, validation: hundreds of µs of GIL per request,
docs/BENCHMARKS.md) run beside it.
The GIL-holding part runs no faster on a worker and contends with the loop on every release
and re-acquire. So the choice needs three figures: the call's time, the share of it that holds
the GIL, and what one hand-off to a worker and back costs. ``decide`` measures them (a fraction
of a second at start-up) and ``choose_dispatch`` applies ``RULES``, a pure function the tests
drive with made-up figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferpool.engine.plan.gil_probe import GilProfile, measure_gil_hold, measure_handoff, median_call_us

__all__ = ["DispatchChoice", "GilProfile", "choose_dispatch", "decide", "measure_gil_hold", "measure_handoff"]

log = logging.getLogger(__name__)

LONG_CALL_US = 5_000.0
"""A call this long runs on worker threads whatever else is measured: inline, it would stall
every other request for longer than several requests' whole trip through the server
(docs/BENCHMARKS.md), while a hand-off (tens of µs) is under 1 % of it."""
HELD_SHARE = 0.5
"""A call holding the GIL for at least this share runs inline: a worker could overlap less
than half of it with the event loop, and would contend with it for the GIL on every op."""
NOISY = 0.25
"""A profile whose two halves of rounds disagree by more than this share of the call is
measured once more (a burst of load from other processes), and the steadier one is kept."""
HANDOFF_MARGIN = 2.0
"""Threads only when the GIL-free part exceeds this many measured hand-offs: the measurement
is an idle round trip, and under load both sides of it also wait for the GIL."""


@dataclass(frozen=True)
class DispatchChoice:
    mode: str
    """``inline`` or ``threads`` (inferpool.engine.executors.EXECUTORS keys)."""
    figures: dict[str, Any]
    """JSON-ready: call_us, gil_share, free_us, handoff_us, usable_cpus, rule, reason, ..."""


@dataclass(frozen=True)
class Rule:
    mode: str
    applies: Callable[[GilProfile, int, float], bool]
    reason: str  # formatted with the figures


RULES: dict[str, Rule] = {
    "long_call": Rule("threads", lambda p, cpus, handoff: p.call_us >= LONG_CALL_US,
                      "a {call_us:.0f} us call inline would stall the event loop (threads from {long_us:.0f} us)"),
    "one_cpu": Rule("inline", lambda p, cpus, handoff: cpus < 2,
                    "1 usable CPU: a worker thread cannot run beside the event loop, a hand-off only adds cost"),
    "holds_gil": Rule("inline", lambda p, cpus, handoff: p.gil_share >= HELD_SHARE,
                      "other threads lose the GIL for {gil_share:.0%} of the call's {call_us:.0f} us (held, or "
                      "handed back and forth): a worker thread could not overlap it with the event loop"),
    "handoff_dearer": Rule("inline", lambda p, cpus, handoff: p.free_us <= HANDOFF_MARGIN * handoff,
                           "the call's GIL-free part ({free_us:.0f} us) does not pay for a hand-off to a worker "
                           "thread ({handoff_us:.0f} us, x{margin:g})"),
    "releases_gil": Rule("threads", lambda p, cpus, handoff: True,
                         "the call runs {free_us:.0f} us without the GIL, more than {margin:g} hand-offs "
                         "({handoff_us:.0f} us each), and {usable_cpus} CPUs can overlap it with the event loop"),
}  # fmt: skip
"""Checked in order; the first that applies decides."""


def choose_dispatch(profile: GilProfile, usable_cpus: int, handoff_us: float) -> DispatchChoice:
    """The first rule of ``RULES`` that applies, with the figures it was decided from."""
    rule_name, rule = next((n, r) for n, r in RULES.items() if r.applies(profile, usable_cpus, handoff_us))
    measured = profile.calls > 0  # else only the call's time was (see ``decide``)
    figures: dict[str, Any] = {
        "call_us": round(profile.call_us, 1),
        "gil_share": round(profile.gil_share, 3) if measured else None,
        "free_us": round(profile.free_us, 1) if measured else None,
        "handoff_us": round(handoff_us, 1) if measured else None,
        "usable_cpus": usable_cpus,
        "calls_measured": profile.calls,
        "noise": round(profile.noise, 3),
        "rule": rule_name,
    }
    figures["reason"] = rule.reason.format(**figures, long_us=LONG_CALL_US, margin=HANDOFF_MARGIN)
    return DispatchChoice(rule.mode, figures)


def decide(call: Callable[[], object], usable_cpus: int, seconds: float = 0.2) -> DispatchChoice:
    """Measure ``call`` (warm, on this thread) and the hand-off, then choose; logs the choice.
    Takes ``seconds`` plus a sixth of it for the hand-off (twice ``seconds`` when the first
    reading is NOISY). A call past LONG_CALL_US, or 1 usable CPU, needs only the call's time: no
    GIL share could change the choice then."""
    started = time.perf_counter()
    call_us = median_call_us(call, 5)
    if call_us >= LONG_CALL_US or usable_cpus < 2:
        profile, handoff_us = GilProfile(call_us, call_us, calls=0, noise=0.0), 0.0
    else:
        profile, handoff_us = measure_gil_hold(call, seconds), measure_handoff(seconds / 6)
        if profile.noise > NOISY:
            profile = min(profile, measure_gil_hold(call, seconds), key=lambda p: p.noise)
    choice = choose_dispatch(profile, usable_cpus, handoff_us)
    choice.figures["measure_seconds"] = round(time.perf_counter() - started, 3)
    log.info("dispatch auto: %s (%s)", choice.mode, choice.figures)
    return choice
