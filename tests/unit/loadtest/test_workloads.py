"""The workload comparisons: every workload's variants, and the ratios printed under a table."""

from __future__ import annotations

from inferpool.harness.payloads import PAYLOADS
from loadtest.compare import LIMIT, by_round, ratios
from loadtest.workloads import WORKLOADS, variants_for


def test_every_workload_has_its_request_and_the_peers_at_each_setting():
    for name, workload in WORKLOADS.items():
        assert workload.payload_name in PAYLOADS
        names = [variant.name for variant in variants_for(name)]
        assert names[0] == "InferPool defaults"
        if workload.peer is not None:  # 1 and 2 processes of 1 and 2 threads
            assert sum(n.startswith("FastAPI") for n in names) == 4
    assert WORKLOADS["resnet50"].payload().path == "/v2/models/resnet50/infer"
    assert WORKLOADS["minilm16"].payload().body.count(b"Variation number") == 16


def test_ratios_take_the_best_peer_and_the_limit_that_applies_at_each_concurrency():
    runs = [
        {"label": "InferPool defaults", "concurrency": 1, "achieved_rps": 18.0},
        {"label": "InferPool defaults", "concurrency": 4, "achieved_rps": 22.0},
        {"label": "InferPool 1 process", "concurrency": 4, "achieved_rps": 30.0},  # not a peer
        {"label": "FastAPI 1p x 2 threads", "concurrency": 1, "achieved_rps": 12.0},
        {"label": "FastAPI 2p x 1 thread", "concurrency": 1, "achieved_rps": 9.0},
        {"label": "FastAPI 2p x 1 thread", "concurrency": 4, "achieved_rps": 11.0},
        {"label": LIMIT, "concurrency": 4, "achieved_rps": 40.0},  # the bare handler: no peer
    ]
    lines = ratios(runs, {"one_stream": 20.0, "every_core": 24.0}).splitlines()
    assert lines == [
        "c=1: defaults 18.0 req/s = 0.90x the limit, 1.50x the best peer (FastAPI 1p x 2 threads, 12.0)",
        "c=4: defaults 22.0 req/s = 0.92x the limit, 2.00x the best peer (FastAPI 2p x 1 thread, 11.0)",
    ]


def test_each_round_is_held_to_the_limit_measured_before_it():
    runs = [
        {"label": "InferPool defaults", "concurrency": 1, "achieved_rps": 18.0, "round": 0},
        {"label": "InferPool defaults", "concurrency": 4, "achieved_rps": 22.0, "round": 0},
        {"label": "FastAPI 2p x 1 thread", "concurrency": 4, "achieved_rps": 11.0, "round": 0},  # not ours
        {"label": "InferPool defaults", "concurrency": 4, "achieved_rps": 19.0, "round": 1},
    ]
    limits = [{"one_stream": 20.0, "every_core": 24.0}, {"one_stream": 19.0, "every_core": 20.0}]
    assert by_round(runs, limits).splitlines() == [
        "round 1 (limit 20.0 / 24.0): c=1 0.90x, c=4 0.92x",
        "round 2 (limit 19.0 / 20.0): c=4 0.95x",
    ]
