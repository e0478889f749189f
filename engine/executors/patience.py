"""Whether a forming batch waits for company: only while waiting has been paying.

A model whose full batch runs many times the samples/s of one sample (the digits CNN: a call is
mostly its fixed cost) was told to wait ``max_queue_delay_us`` for company. But company comes
only from clients that are not waiting for an answer themselves: at one connection never, and
at a few keep-alive clients per process rarely, since the others are in the batch the wait
holds back. Measured on digits, onnxruntime, 2 processes, batching 8 against off, both up at
once: 0.19x at 1 connection, 0.46x at 8, 0.99x at 64 (docs/BENCHMARKS.md, issue 29). Under load
batches fill from the queue without any wait, so the wait only ever pays at the load between.

So the leader keeps count of its waits that did not pay: a batch it waited for that ran before
it filled (``max_batch_size`` or a preferred size), since company that comes but leaves the
batch short of full was worth less than the wait (digits, 4 clients a process: each wait found
one or two, and batching ran at 0.71-0.80x off). After GIVE_UP of them in a row it stops waiting
(a forming batch runs with what is queued, as with ``wait_for_company = "off"``), and waits
again only once in ``every`` lone batches, a probe, backing off from FIRST_PROBE to LAST_PROBE
while the probes do not pay; one that fills its batch makes it patient again. Where unbatched
dispatch runs inline, a given-up batcher also runs a request that finds nothing queued, forming
or running on the event loop itself (``inline``), as batching off does, and sends the probes to
the leader: the thread hand-off was the rest of the loss (digits at one connection: 230 against
159 us a request). The leader alone calls ``waits`` and ``found``, the event loop alone
``inline``; what each reads of the other's counts is a single int: no lock.
"""

from __future__ import annotations

GIVE_UP = 4
FIRST_PROBE = 16
LAST_PROBE = 1024


class _Turns:
    """Says yes once in ``every`` asks: the probes' count, one per thread that asks."""

    def __init__(self) -> None:
        self.asked = 0

    def due(self, every: int) -> bool:
        self.asked += 1
        if self.asked < every:
            return False
        self.asked = 0
        return True


class Patience:
    def __init__(self, probes_at_admission: bool = False) -> None:
        self.fruitless = 0
        """Waits in a row whose batch ran before it filled."""
        self.every = FIRST_PROBE
        self._leader_turns = _Turns()
        self._admission_turns = _Turns()
        self.probes_at_admission = probes_at_admission
        """The batcher runs idle requests inline once given up (``inline``): then only probes
        reach the leader, and each of them waits."""

    @property
    def given_up(self) -> bool:
        return self.fruitless >= GIVE_UP

    def inline(self) -> bool:
        """On the event loop, for a request that finds nothing queued, forming or running:
        whether it runs there, at once; once in ``every`` such requests it goes to the leader
        instead, a probe whose wait shows whether waiting pays now."""
        return self.given_up and not self._admission_turns.due(self.every)

    def waits(self) -> bool:
        """Whether to wait for company now (a probe, once given up, every ``every`` batches)."""
        if not self.given_up or self.probes_at_admission:
            return True
        return self._leader_turns.due(self.every)

    def found(self, company: bool) -> None:
        """How a batch the leader waited for ended: full (``company``), or short of it."""
        if company:
            self.fruitless, self.every, self._leader_turns.asked = 0, FIRST_PROBE, 0
            return
        self.fruitless += 1
        if self.fruitless > GIVE_UP:  # a probe that did not pay: probe more rarely
            self.every = min(self.every * 2, LAST_PROBE)
