"""``inferpool tune``'s progress on stderr: a bar over the budget with the ETA, redrawn in place on
a terminal; on anything else (a log, a CI job) one line per event and no redraws."""

from __future__ import annotations

import sys
from typing import TextIO

from inferpool.cli.tune.budget import Budget, format_seconds

WIDTH = 24


class Progress:
    def __init__(self, budget: Budget, stream: TextIO | None = None) -> None:
        self.budget = budget
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._drawn = False

    def say(self, text: str) -> None:
        """A line that stays (above the bar, on a terminal)."""
        self._clear()
        print(text, file=self.stream, flush=True)

    def update(self, text: str, eta: float) -> None:
        """Redraw the bar: the share of the expected time used, ``text``, the ETA."""
        if not self.live:
            return
        used = self.budget.used()
        share = used / max(used + eta, 1e-9)
        filled = round(share * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        line = (
            f"[{bar}] {share:4.0%} {text} | ETA {format_seconds(eta)}, budget left {format_seconds(self.budget.left())}"
        )
        self.stream.write("\r\x1b[2K" + line[:200])
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[2K")
            self._drawn = False
