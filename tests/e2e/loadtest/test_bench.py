"""loadtest.bench's cases that start real servers or load MiniLM, run for real with tiny counts:
each must finish and give figures of the right shape (not good ones: the machine is shared).
The cases that need wrk or docker (door, wide, observe, handoff's servers, container) are only
parsed, in tests/unit/loadtest/test_bench.py."""

from __future__ import annotations

import json
import subprocess
import sys

from inferpool.engine import BACKENDS
from inferpool.harness.server import REPO_ROOT
from loadtest import bench


def _bench(*argv: str, timeout: float = 300) -> str:
    """The case as a process, as the docs run it: its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.bench", *argv],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _table(out: str) -> list[list[str]]:
    """The Markdown table's body rows, as cells."""
    lines = [line for line in out.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def test_start_times_a_cold_and_a_warm_start():
    found = bench.runner("start")(["--model", "inferpool.engine.zoo.digits:build", "--runs", "1"])
    assert isinstance(found, dict)
    (cold,), (warm,) = found["cold"], found["warm"]
    assert 0 < cold < 300
    assert 0 < warm < 300


def test_processes_measures_one_process_and_the_default():
    rows = bench.runner("processes")(["--only", "digits", "--seconds", "1"])
    assert isinstance(rows, list)
    assert [row["name"] for row in rows] == ["digits workers1", "digits default"]
    one, default = rows
    assert one["processes"] == 2  # the supervisor and one serving process
    assert default["processes"] >= 2
    for row in rows:
        assert row["errors"] == 0
        assert row["rate"] > 0
        assert row["pss_mb"] > 0


def test_batching_http_runs_every_variant_and_writes_its_runs(tmp_path):
    argv = ["--suite", "digits", "--clients", "2", "--seconds", "1", "--repeats", "1", "--out", str(tmp_path)]
    runs = bench.runner("batching_http")(argv)
    assert isinstance(runs, list)
    assert [run["max_batch_size"] for run in runs] == [1, 32]
    assert all(run["achieved_rps"] > 0 and not run["other_status"] for run in runs)
    assert json.loads((tmp_path / "runs.json").read_text()) == runs


def test_codec_end_to_end_on_a_server():
    figures = bench.runner("codec")(["--requests", "3"])
    assert isinstance(figures, dict)
    assert len(figures) == 6  # 2 inputs x 3 paths
    assert all(row["codec_us"] > 0 and row["p50_ms"] > 0 for row in figures.values())


def test_lone_pairs_v2_and_predict_on_one_connection():
    found = bench.runner("lone")(["--requests", "20", "--warmup", "5", "--rounds", "1"])
    assert isinstance(found, dict)
    (figures,) = found.values()
    assert set(figures) == {"paired gap", "v2 wall", "v2 cpu", "predict wall", "predict cpu"}
    for body in ("v2", "predict"):
        (wall,), (cpu,) = figures[f"{body} wall"], figures[f"{body} cpu"]
        assert cpu > 0
        assert 0 < wall < 1e6


def test_grpc_gives_every_protocol_and_floor_at_1_and_8_callers():
    # A process of its own: the case pins its caller to CPU 1 and starts echo servers with -m.
    rows = _table(_bench("grpc", "--seconds", "0.5", "--rounds", "1"))
    kinds = ["grpc native", "grpc grpcio", "http v2 binary", "http json", "grpcio echo", "native echo"]
    assert [(row[0], row[1]) for row in rows] == [(n, kind) for n in ("1", "8") for kind in kinds]
    assert all(float(row[2].replace(",", "")) > 0 for row in rows)  # calls/s


def test_minilm_in_process():
    argv = ("--backends", "eager", "--batch-sizes", "1", "--clients", "2", "--seconds", "0.3", "--repeats", "1")
    (row,) = _table(_bench("minilm", *argv, "--warmup", "0.1"))
    backend, batch, clients, sentences_per_s, p50, p99, mean_batch = row
    assert (backend, batch, clients, mean_batch) == ("eager", "1", "2", "1.0")
    assert float(sentences_per_s) > 0
    assert 0 < float(p50) <= float(p99)


def test_defaults_choose_a_backend_and_a_dispatch():
    lines = _bench("defaults", "--models", "mlp", "--repeats", "1", "--json").splitlines()
    (row,) = [json.loads(line) for line in lines if line.startswith("{")]
    assert row["model"] == "mlp"
    assert row["backend"] in set(BACKENDS)
    assert row["dispatch"] in {"inline", "threads"}
    assert "rule" in row["figures"]
