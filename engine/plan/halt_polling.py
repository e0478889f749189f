"""Whether this machine's idle vCPUs halt at once: what one connection pays on a KVM guest.

Between two requests of one client the cores idle while the answer goes out and the next body
comes in (about 1.5 ms for a ResNet-50 image). A KVM guest's idle vCPU halts, a VM exit, unless
the guest's ``haltpoll`` cpuidle driver first polls for up to ``guest_halt_poll_ns``; a vCPU the
host took back wakes slower and colder. Measured on such a guest with the poll at 0
(``python -m loadtest.bench idle_gap``): a 2-thread bf16 ResNet-50 call after a 0.5-3 ms idle
gap took 1.18-1.40x one made back to back; one thread 1.02-1.12x. The served rate at one
connection rose 1.17x (75-85 to 88-94 images/s, one server, windows alternating) with the poll
at 2 ms; at 4 and 16 connections, where the cores seldom idle, 1.03x and 1.02x
(docs/BENCHMARKS.md). The poll is the machine's to set, not a server's: the start-up log says so
where a model lends idle cores (its calls span every core) and the poll is under ``ENOUGH_NS``.
"""

from __future__ import annotations

from pathlib import Path

DRIVER = Path("/sys/devices/system/cpu/cpuidle/current_driver")
POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
ENOUGH_NS = 1_000_000
"""A poll that covers a request's idle gap (the ResNet-50 gap above, with room)."""


def advice(driver: Path = DRIVER, poll_ns: Path = POLL_NS) -> str | None:
    """A line for the start-up log where idle vCPUs halt within less than ``ENOUGH_NS``; None
    elsewhere (bare metal, another hypervisor or cpuidle driver, a long enough poll, unreadable)."""
    try:
        if driver.read_text().strip() != "haltpoll":
            return None
        polled = int(poll_ns.read_text().strip())
    except (OSError, ValueError):
        return None
    if polled >= ENOUGH_NS:
        return None
    return (
        f"this KVM guest halts an idle vCPU after polling {polled / 1e3:g} us (guest_halt_poll_ns): a call "
        "that spans every core after a client's idle gap runs up to ~1.4x slower than back to back, which "
        f"costs most at one connection; on a latency-bound node write {ENOUGH_NS * 2} to {poll_ns} "
        "(docs/deploy.md, 'Light load on a KVM guest')"
    )
