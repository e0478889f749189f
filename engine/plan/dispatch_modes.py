"""What ``RuntimeOptions.dispatch`` may say. Here and not with the executors, so that the options
(and the config, which imports them) check a name without importing the executors, whose
modules import the request path and the options themselves."""

from __future__ import annotations

DISPATCH_MODES = ("threads", "inline", "auto")
"""``threads`` and ``inline`` name an executor (inferpool.engine.executors); ``auto`` measures
which (inferpool.engine.plan.dispatch_choice). ``batch`` follows from ``max_batch_size`` > 1 (set, or
chosen for 0: inferpool.engine.plan.auto_batch)."""
