"""What precision a model is served in, and why: the verdicts of this process tree.

A light module (numpy and the options, no exporter) so that the config route and the
``auto`` rule can read and record a verdict without importing what int8 needs. The int8 and bf16
gates (inferpool.engine.backends.precision) and the ``auto`` rule
(inferpool.engine.backends.precision_auto) record here; a rebuild for the thread plan, a forked
serving process and the wide lane read here, so that every process serves the same precision.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from inferpool.engine.backends.gate import Gate
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``/v2/models/{name}/config`` shows: asked, served, why, the gate's figures, and every
    candidate's (with its example call's median milliseconds when several passed)."""

    configured: str
    served: str
    gate: Gate | None = None
    candidates: tuple[Gate, ...] = ()
    call_ms: Mapping[str, float] = field(default_factory=dict)
    raced: tuple[str, RuntimeOptions] | None = None
    """The backend and options (threads aside) the race ran for, to be reused for them."""
    reason: str = ""
    """Why this precision serves, in a sentence (the ``auto`` rule's verdict)."""
    cached: bool = False
    """Read from the export cache: a warm start neither gated nor timed again."""

    def report(self) -> dict[str, Any]:
        def shown(gate: Gate) -> dict[str, Any]:
            return {**asdict(gate), "passed": gate.passed}

        return {
            "configured": self.configured,
            "served": self.served,
            "method": self.gate.method if self.gate is not None and self.served != "fp32" else None,
            "gate": None if self.gate is None else shown(self.gate),
            "candidates": [shown(g) for g in self.candidates],
            "call_ms": dict(self.call_ms),
            "reason": self.reason,
            "cached": self.cached,
        }


_choices: weakref.WeakKeyDictionary[torch.nn.Module, PrecisionChoice] = weakref.WeakKeyDictionary()


def precision_choice(module: InferenceModule) -> PrecisionChoice | None:
    """The last precision decision for ``module`` in this process (None: fp32 was asked)."""
    return _choices.get(module.module)


def record(module: InferenceModule, choice: PrecisionChoice) -> None:
    _choices[module.module] = choice


def forget(module: InferenceModule) -> None:
    _choices.pop(module.module, None)


def raced_for(backend: str, options: RuntimeOptions) -> tuple[str, RuntimeOptions]:
    """What a choice holds for: the backend and the options but their thread plan (a rebuild for
    the plan, or a forked serving process, reuses the choice) and ``max_batch_size``, which
    ``max_batch_size = 0`` resolves after the race from the race's winner
    (inferpool.engine.plan.auto_batch): the lanes built after it must still see the verdict."""
    # Preferred batch sizes need max_batch_size set (options.py), which is then never resolved.
    batch = options.max_batch_size if options.preferred_batch_sizes else 0
    return backend, replace(options, intra_op_threads=1, num_runtimes=0, max_batch_size=batch)


def bf16_verdict(module: InferenceModule, options: RuntimeOptions, backend: str) -> str | None:
    """What this process tree serves for a bf16 or ``auto`` ask of these options on ``backend``
    ("bf16" or "fp32"), or None before the gate and race have run: a backend that knows bf16 won
    skips building fp32."""
    earlier = _choices.get(module.module)
    if options.precision not in ("bf16", "auto") or earlier is None or earlier.configured != options.precision:
        return None
    return earlier.served if earlier.raced == raced_for(backend, options) else None
