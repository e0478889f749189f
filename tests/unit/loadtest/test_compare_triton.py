"""Triton's row in loadtest.compare: its variant sends InferPool's v2 JSON body, and InferPool's
ratios to it are per concurrency, on both bodies, with the trees' PSS."""

from __future__ import annotations

from typing import Any

from loadtest.compare import variants
from loadtest.compare_triton import PREDICT_DEFAULTS, TRITON, V2_DEFAULTS, against_triton, triton_variant


def run(label: str, concurrency: int, rps: float, p99: float, pss: float) -> dict[str, Any]:
    return {"label": label, "concurrency": concurrency, "achieved_rps": rps, "latency_ms": {"p99": p99},
            "server_pss_mb": pss}  # fmt: skip


def test_triton_and_inferpool_on_v2_json_send_the_same_body():
    found = {variant.name: variant for variant in variants(None, "/bin/sh")}  # any existing interpreter
    assert found[TRITON].payload == found[V2_DEFAULTS].payload == "digits-v2-json"
    assert found[TRITON].ready_path == "/v2/models/digits/ready"
    assert TRITON not in {variant.name for variant in variants(None, "/nonexistent/python")}
    assert triton_variant("/venv/bin/python").name == TRITON


def test_ratios_to_triton_per_concurrency_and_the_trees_pss():
    runs = [
        run(TRITON, 1, 1500.0, 1.0, 140.0),
        run(TRITON, 64, 15000.0, 8.0, 140.0),
        run(V2_DEFAULTS, 1, 3600.0, 0.5, 245.0),
        run(V2_DEFAULTS, 64, 9000.0, 14.0, 250.0),
        run(PREDICT_DEFAULTS, 64, 12000.0, 10.0, 252.0),
    ]
    lines = against_triton(runs).splitlines()
    assert lines[0] == (
        f"{V2_DEFAULTS} against {TRITON}: c=1 2.40x req/s, p99 0.50x; c=64 0.60x req/s, p99 1.75x; "
        "tree PSS 250 / 140 MB = 1.79x"
    )
    assert lines[1].startswith(f"{PREDICT_DEFAULTS} against {TRITON}: c=64 0.80x req/s, p99 1.25x; tree PSS 252")
    assert against_triton([run(V2_DEFAULTS, 1, 3600.0, 0.5, 245.0)]) == ""
