"""``inferpool tune``'s clock: the ``--budget`` it must never exceed, what is kept back for the
confirmation run, and what the next step may spend."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
EXIT_MARGIN = 5.0
"""Seconds kept at the very end: stopping the servers still up (a SIGTERM drain each) and writing the
results (importing matplotlib for the plot)."""


def parse_duration(text: str) -> float:
    """``"10m"``, ``"90s"``, ``"1h"``, ``"1m30s"`` or plain seconds (``"75"``) -> seconds."""
    text = text.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise ValueError(f"budget {text!r} is not a duration: use e.g. 10m, 90s, 1h or 1m30s") from None
        seconds = sum(float(number) * UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"budget {text!r} must be positive")
    return seconds


def process_start() -> float:
    """When this process started, on the monotonic clock: the budget counts the interpreter's
    and torch's import too (a few seconds), since the user's clock does. Now, where unknown."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        age = 0.0
    return time.monotonic() - max(0.0, age)


@dataclass
class Budget:
    """Wall-clock seconds from ``start``; ``reserve`` is held back for the confirmation run."""

    seconds: float
    start: float = field(default_factory=process_start)
    reserve: float = 0.0

    @property
    def deadline(self) -> float:
        return self.start + self.seconds - EXIT_MARGIN

    def used(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        """Seconds until the deadline (the confirmation's reserve included)."""
        return max(0.0, self.deadline - time.monotonic())

    def for_trials(self) -> float:
        """Seconds trials may still spend without eating into the confirmation's reserve."""
        return max(0.0, self.left() - self.reserve)

    def fits(self, seconds: float) -> bool:
        return seconds <= self.for_trials()


def format_seconds(seconds: float) -> str:
    """``754`` -> ``12m34s``; ``42.3`` -> ``42s``."""
    seconds = max(0, round(seconds))
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"
