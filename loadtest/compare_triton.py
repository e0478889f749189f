"""Triton Inference Server 2.51 in ``loadtest.compare`` (digits): its variant and InferPool's
ratios to it (issue 57's goals).

Triton runs from its own venv, never the product's: ``make .venv-triton`` installs the
``nvidia-pytriton`` 0.7.0 wheel there (the C++ ``tritonserver`` 2.51, its Python backend, numpy < 2
for the backend's stub, onnxruntime), and ``loadtest/peers/triton_digits.py`` runs its
``tritonserver`` on the digits CNN: InferPool's own ONNX export on onnxruntime inside the Python
backend's stubs, 2 instances, dynamic batching, answering the v2 JSON body InferPool's
``digits-v2-json`` payload sends. Its tree is tritonserver and one stub per instance. The export
is made (or found in the export cache) in this process, which has torch; the Triton venv has
neither torch nor InferPool.
"""

from __future__ import annotations

from typing import Any

from inferpool.harness.server import REPO_ROOT, Command
from loadtest.apart import run_apart
from loadtest.workloads import Variant

TRITON = "Triton 2.51 v2 JSON"
V2_DEFAULTS = "InferPool defaults v2 JSON"
PREDICT_DEFAULTS = "InferPool defaults"
TRITON_PYTHON = REPO_ROOT / ".venv-triton" / "bin" / "python"
SCRIPT = REPO_ROOT / "loadtest" / "peers" / "triton_digits.py"


def triton_command(python: str, *args: str) -> Command:
    """The Triton peer on the port: ``python`` is the Triton venv's interpreter."""

    def argv(port: int) -> list[str]:
        # Made apart, and only once a Triton row runs: torch's and onnxruntime's libraries mapped
        # here would keep the next InferPool supervisor's loading code resident (loadtest/apart.py).
        return [python, str(SCRIPT), "--port", str(port), "--onnx", run_apart(digits_export), *args]

    return argv


def digits_export() -> str:
    """The digits CNN's ONNX export (loadtest/peers/bare_handler.py), in the process that calls it."""
    from loadtest.peers.bare_handler import export

    return export()


def triton_variant(python: str) -> Variant:
    return Variant(TRITON, triton_command(python), payload="digits-v2-json", ready_path="/v2/models/digits/ready")


def against_triton(runs: list[dict[str, Any]]) -> str:
    """InferPool's no-flag server on v2 JSON and on ``/predict`` as multiples of Triton's req/s
    and p99, per concurrency, and the trees' PSS (issue 57: >= 1.0x the req/s at 8 and 64
    connections, >= 2x at 1, p99 at 64 <= Triton's, PSS <= 2x Triton's); empty without a Triton row."""

    def rows(label: str) -> dict[int, dict[str, Any]]:
        return {run["concurrency"]: run for run in runs if run["label"] == label}

    triton = rows(TRITON)
    if not triton:
        return ""
    lines = []
    for name in (V2_DEFAULTS, PREDICT_DEFAULTS):
        ours = rows(name)
        cells = [
            f"c={c} {ours[c]['achieved_rps'] / max(base['achieved_rps'], 1e-9):.2f}x req/s, "
            f"p99 {ours[c]['latency_ms']['p99'] / max(base['latency_ms']['p99'], 1e-9):.2f}x"
            for c, base in sorted(triton.items())
            if c in ours
        ]
        our_pss = max((run.get("server_pss_mb", 0.0) for run in ours.values()), default=0.0)
        triton_pss = max(run.get("server_pss_mb", 0.0) for run in triton.values())
        if our_pss and triton_pss:
            cells.append(f"tree PSS {our_pss:.0f} / {triton_pss:.0f} MB = {our_pss / triton_pss:.2f}x")
        if cells:
            lines.append(f"{name} against {TRITON}: " + "; ".join(cells))
    return "\n".join(lines)
