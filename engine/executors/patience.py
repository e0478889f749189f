"""Whether a forming batch waits for company: only while waiting has been finding some.

A model whose full batch runs many times the samples/s of one sample (the digits CNN: a call is
mostly its fixed cost) was told to wait ``max_queue_delay_us`` for company. But company comes
only from clients that are not waiting for an answer themselves: at one connection never, and
at a few keep-alive clients per process rarely, since the others are in the batch the wait
holds back. Measured on digits, onnxruntime, 2 processes, batching 8 against off, both up at
once: 0.19x at 1 connection, 0.46x at 8, 0.99x at 64 (docs/BENCHMARKS.md, issue 29). Under load
batches fill from the queue without any wait, so the wait only ever pays at the load between.

So the leader keeps count of its waits that ended with nobody new: after GIVE_UP of them in a
row it stops waiting (a forming batch runs with what is queued, as with ``wait_for_company =
"off"``), and waits again only once in ``every`` lone batches, a probe, backing off from
FIRST_PROBE to LAST_PROBE while the probes find nobody; one wait that finds company makes it
patient again. Only the leader touches it: no lock.
"""

from __future__ import annotations

GIVE_UP = 4
FIRST_PROBE = 16
LAST_PROBE = 1024


class Patience:
    def __init__(self) -> None:
        self.fruitless = 0
        """Waits in a row that ended with nobody new."""
        self.every = FIRST_PROBE
        self._skipped = 0

    def waits(self) -> bool:
        """Whether to wait for company now (a probe, once given up, every ``every`` batches)."""
        if self.fruitless < GIVE_UP:
            return True
        self._skipped += 1
        if self._skipped < self.every:
            return False
        self._skipped = 0
        return True

    def found(self, company: bool) -> None:
        """How a wait ended: someone new came (``company``), or its time ran out."""
        if company:
            self.fruitless, self.every, self._skipped = 0, FIRST_PROBE, 0
            return
        self.fruitless += 1
        if self.fruitless > GIVE_UP:  # a probe that found nobody: probe more rarely
            self.every = min(self.every * 2, LAST_PROBE)
