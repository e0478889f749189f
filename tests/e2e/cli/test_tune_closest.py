"""`inferpool tune` for real when no setting can meet the objective: it exits 1 within its
budget, names the closest (the row marked in the table, with how far it missed), never calls
anything a winner, and writes closest.toml, which `serve --config` loads and serves with."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from cli.tune_rank import DEFAULTS
from cli.tune_space import Knobs
from config import load_settings
from harness.client import KeepAlive
from harness.payloads import json_request
from harness.server import INFERPOOL, inferpool_serve, launch

BUDGET = 60.0
P99_MS = 0.05  # 50 µs: no HTTP round trip here is that fast
SLACK = 3.0  # the subprocess' own start and exit, beyond what the budget can see


@pytest.fixture(scope="module")
def missed(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune-closest")
    started = time.monotonic()
    done = subprocess.run(
        [INFERPOOL, "tune", "--model", "engine.zoo.mlp:build", "--runtime.auto-backends", '["eager", "onnxruntime"]',
         "--p99-ms", str(P99_MS), "--concurrency", "4", "--budget", f"{BUDGET:g}s", "--trial-seconds", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=BUDGET + 60,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    return done, elapsed, out, json.loads((out / "trials.json").read_text())


def test_it_exits_1_within_the_budget_and_names_the_closest(missed):
    done, elapsed, _, report = missed
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert elapsed <= BUDGET + SLACK
    assert report["seconds_used"] <= BUDGET
    assert report["winner"] is None
    assert "winner" not in done.stdout
    closest = report["closest"]
    trials = {trial["name"]: trial for trial in report["trials"]}
    assert not any(trial["met"] for trial in trials.values())
    summary = trials[closest]["summary"]
    assert report["closest_miss"] == pytest.approx(summary["p99_ms"] / P99_MS, rel=1e-3)
    assert f"no setting met p99 <= {P99_MS:g} ms; the closest: {closest} (p99 {summary['p99_ms']:.1f} ms" in done.stdout
    assert f"{summary['p99_ms'] / P99_MS:.2f}x the objective" in done.stdout
    marked = [line for line in done.stdout.splitlines() if line.endswith("<- closest")]
    assert len(marked) == 1
    assert marked[0].startswith(closest)


def test_serve_loads_closest_toml_and_serves_with_it(missed):
    _, _, out, report = missed
    path = out / "closest.toml"
    assert not (out / "tuned.toml").exists()
    assert path.read_text().startswith(f"# inferpool tune: no setting met p99 <= {P99_MS:g} ms; the closest: ")
    settings = load_settings(path)
    closest = next(t for t in report["trials"] if t["name"] == report["closest"])
    expected = Knobs(**closest["knobs"])
    if closest["name"] == DEFAULTS:
        expected = expected.resolved(closest["served"])
    assert Knobs.of(settings.runtime, settings.workers) == expected
    with launch(inferpool_serve("--config", str(path)), name="closest", ready_timeout=120) as server:
        client = KeepAlive(server.port)
        try:
            status, body = client.exchange(client.encode(json_request([0.5] * 64)))
        finally:
            client.close()
        assert status == 200, body
        assert len(json.loads(body)["outputs"]["logits"]) == 10
