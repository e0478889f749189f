"""``max_batch_size = 0``'s decision, kept beside the exports: a warm start serves the batch an
earlier start chose, rather than a new decision from a few calls timed on a busy machine.

Kept as the backend's ``auto`` choice is (inferpool.engine.backends.choice_cache): under the key
of what the model is (the export's key: its code, weights, schema, the versions, the machine)
plus what the decision was measured under (the backend and precision serving, the thread plan,
the dispatch and queue delay set). Anything that could change it is a new key, decided afresh.
A model whose code cannot be read has no key: it decides on every start. Delete the
``*.batch.json`` file (or the cache) to have it decided again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from inferpool.engine.compile_cache import artifact_path, cache_dir, content_key, write_atomically
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import AUTO_MAX_BATCH, RuntimeOptions
from inferpool.engine.plan.auto_batch import RULES, BatchDecision
from inferpool.engine.plan.threads import ThreadPlan

log = logging.getLogger(__name__)
SUFFIX = ".batch.json"


def decision_path(module: InferenceModule, options: RuntimeOptions, served_by: str, plan: ThreadPlan) -> Path | None:
    """Where the decision for ``module`` served by ``served_by`` (backend and precision) is kept."""
    from inferpool.engine.backends.onnxruntime.export import source_key  # the exporter's imports: only here

    base = source_key(module)
    if base is None:
        return None
    measured_under = (
        served_by, f"dispatch={options.dispatch}", f"max_queue_delay_us={options.max_queue_delay_us:g}",
        f"threads={plan.runtimes}x{plan.intra_op_threads}/{plan.cpus}", f"auto_max_batch={AUTO_MAX_BATCH}",
    )  # fmt: skip
    key = content_key([base, "auto-batch", *measured_under])
    return artifact_path(cache_dir(options.compile_cache_dir), module.name, key, SUFFIX)


def read_decision(path: Path) -> BatchDecision | None:
    """The kept decision, or None (absent, unreadable, or from rules that changed)."""
    try:
        saved = json.loads(path.read_text())
        decision = BatchDecision(int(saved["size"]), str(saved["rule"]), str(saved["reason"]), dict(saved["figures"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    rule = RULES.get(decision.rule)
    return decision if rule is not None and rule.size == decision.size else None


def write_decision(path: Path, decision: BatchDecision) -> None:
    """Kept for the next start; a cache that cannot be written only costs that start a decision."""

    def produce(target: Path) -> None:
        saved = {"size": decision.size, "rule": decision.rule, "reason": decision.reason, "figures": decision.figures}
        target.write_text(json.dumps(saved))

    try:
        write_atomically(path, produce)
    except OSError as exc:
        log.info("batch auto: could not keep the decision in %s (%s); the next start decides again", path, exc)
