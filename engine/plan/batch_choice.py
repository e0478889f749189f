"""Whether dynamic batching can win for a model, from the calls timed at start-up.

Batching pays only where a call of many samples costs less per sample than a call of one: a
call with a large fixed part (Python dispatch between a small model's ops) gains many times over,
while a compute-bound model whose cost is already per sample (a ResNet-50 on one thread, a model
that loops over its samples) gains nothing, and there waiting ``max_queue_delay_us`` for
company only adds that wait to every request -- at one connection it is all loss. So the
start-up measures both sizes (ServedModel seeds admission control with the same calls), and a
model that does not gain ``MIN_GAIN`` batches only what is already queued: no request waits for
one that has not arrived. The choice is logged and shown as ``dispatch_selection`` at
``/v2/models/{name}/config``. Explicit settings win: ``wait_for_company = "on"`` waits
whatever the gain, ``"off"`` never waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_GAIN = 1.1
"""Samples per second at a full batch over samples per second at one, below which no request waits."""


@dataclass(frozen=True)
class BatchChoice:
    rows: int
    one_ms: float
    full_ms: float

    @property
    def gain(self) -> float:
        return self.rows * self.one_ms / self.full_ms if self.full_ms > 0 else 1.0

    @property
    def waits(self) -> bool:
        """A lone request waits up to max_queue_delay_us for company (the model gains from it)."""
        return self.gain >= MIN_GAIN

    def delay_seconds(self, mode: str, max_queue_delay_us: float) -> float:
        """How long a lone request waits for company under ``wait_for_company = mode``."""
        waits = {"on": True, "off": False, "auto": self.waits}[mode]
        return max_queue_delay_us * 1e-6 if waits else 0.0

    @property
    def reason(self) -> str:
        verdict = "requests wait for company" if self.waits else "batching cannot win: only queued requests are joined"
        return f"a {self.rows}-sample call is {self.gain:.2f}x the samples/s of a 1-sample call; {verdict}"

    def report(self) -> dict[str, Any]:
        return {"mode": "batch", "batch_gain": round(self.gain, 2), "waits_for_company": self.waits,
                "one_sample_ms": round(self.one_ms, 3), "full_batch_ms": round(self.full_ms, 3),
                "full_batch_rows": self.rows, "reason": self.reason}  # fmt: skip
