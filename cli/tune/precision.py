"""``inferpool tune --accuracy-cosine C``: precision as one more axis of the search.

int8 (``runtime.precision``: dynamic quantization of MatMul and Gemm, and static QDQ for models
with convolutions; engine/backends/precision.py) changes answers, so it is tried only when asked,
and only where the gate can let it serve: the fp32 search's winner (or closest) on a backend that
quantizes, measured again as int8 with the same knobs. Its server starts with
``precision_strict`` and the gate at ``C``: a model whose int8 outputs fail the gate refuses to
start, so that trial fails, is never measured and never chosen (strict also serves the fastest
int8 that passes without racing it against fp32 at start-up: the trial's load is what measures it
against the fp32 winner); one that passes is ranked with the others, and the confirmation
decides as for any winner. A server that came up serving anything but int8 (it cannot, strict;
said anyway) counts as failed too.
"""

from __future__ import annotations

from dataclasses import replace

from inferpool.cli.tune.trials import Trial, Trials

INT8_BACKENDS = ("onnxruntime", "openvino")


def int8_trial(trials: Trials, number: int) -> Trial | None:
    """The int8 twin of the best trial so far, run (None when not asked, or nothing to twin)."""
    cosine, best = trials.plan.accuracy_cosine, trials.best
    if cosine is None or best is None or best.summary is None:
        return None
    knobs = best.knobs.resolved(best.served)
    if knobs.backend not in INT8_BACKENDS:
        trials.progress.say(
            f"precision: int8 not tried, the best trial serves {knobs.backend} (int8: onnxruntime, openvino)"
        )
        return None
    trial = Trial(f"#{number}", replace(knobs, precision="int8", accuracy_min_cosine=cosine))
    trials.run(trial, f"precision: {best.name} as int8")
    selection = trial.served.get("precision_selection") or {}
    if trial.summary is not None and selection.get("served") != "int8":
        trial.summary, trial.met = None, False
        trial.status = f"failed: served {selection.get('served', 'fp32')}, not int8"
    return trial
