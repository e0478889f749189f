"""Shared by the tune tests: one real `inferpool tune` of the MLP, and the check that a config
it wrote is the trial's settings and serves."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from inferpool.cli.tune.rank import DEFAULTS
from inferpool.cli.tune.space import Knobs
from inferpool.config import load_settings
from inferpool.harness.client import KeepAlive
from inferpool.harness.payloads import json_request
from inferpool.harness.server import INFERPOOL, REPO_ROOT, Server, inferpool_serve, launch

SLACK = 3.0  # the subprocess' own start and exit, beyond what the budget can see


def run_tune(out: Path, p99_ms: float, budget: float) -> tuple[subprocess.CompletedProcess[str], float, dict[str, Any]]:
    """The MLP at 4 clients; two candidate backends keep the model timing short. Returns the
    finished process, its wall-clock seconds and trials.json."""
    started = time.monotonic()
    done = subprocess.run(
        [INFERPOOL, "tune", "--model", "inferpool.engine.zoo.mlp:build",
         "--runtime.auto-backends", '["eager", "onnxruntime"]',
         "--p99-ms", str(p99_ms), "--concurrency", "4", "--budget", f"{budget:g}s", "--trial-seconds", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=budget + 60,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},  # this checkout's inferpool, as the servers'
    )  # fmt: skip
    elapsed = time.monotonic() - started
    return done, elapsed, json.loads((out / "trials.json").read_text())


def assert_ended(
    done: subprocess.CompletedProcess[str], elapsed: float, report: dict[str, Any], code: int, budget: float
) -> None:
    """The run exited with ``code``, within ``budget`` as the caller and as tune itself timed it."""
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    assert elapsed <= budget + SLACK
    assert report["seconds_used"] <= budget


@contextmanager
def serving_the_written_config(path: Path, report: dict[str, Any], chosen: str) -> Iterator[Server]:
    """A server started with ``path``, after checking it holds trial ``chosen``'s settings; the
    server has answered one request with the MLP's ten logits."""
    settings = load_settings(path)
    assert settings.model == "inferpool.engine.zoo.mlp:build"
    trial = next(t for t in report["trials"] if t["name"] == chosen)
    expected = Knobs(**trial["knobs"])
    if trial["name"] == DEFAULTS:
        expected = expected.resolved(trial["served"])
    assert Knobs.of(settings.runtime, settings.workers) == expected
    with launch(inferpool_serve("--config", str(path)), name=path.stem, ready_timeout=120) as server:
        client = KeepAlive(server.port)
        try:
            status, body = client.exchange(client.encode(json_request([0.5] * 64)))
        finally:
            client.close()
        assert status == 200, body
        assert len(json.loads(body)["outputs"]["logits"]) == 10
        yield server
