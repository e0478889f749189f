"""`inferpool tune` for real when no setting can meet the objective: it exits 1 within its
budget, names the closest (the row marked in the table, with how far it missed), never calls
anything a winner, and writes closest.toml, which `serve --config` loads and serves with, only
when the confirmation shows it ahead of the defaults."""

from __future__ import annotations

import pytest

from tests.e2e.cli.tune_run import assert_ended, run_tune, serving_the_written_config

BUDGET = 60.0
P99_MS = 0.05  # 50 µs: no HTTP round trip here is that fast


@pytest.fixture(scope="module")
def missed(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune-closest")
    done, elapsed, report = run_tune(out, P99_MS, BUDGET)
    return done, elapsed, out, report


def test_it_exits_1_within_the_budget_and_names_the_closest(missed):
    done, elapsed, _, report = missed
    assert_ended(done, elapsed, report, 1, BUDGET)
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
    done, _, out, report = missed
    path = out / "closest.toml"
    assert not (out / "tuned.toml").exists()
    if not report["confirmed"]:
        assert not path.exists()
        assert "the defaults are the answer" in done.stdout
        return
    assert path.read_text().startswith(f"# inferpool tune: no setting met p99 <= {P99_MS:g} ms; the closest: ")
    with serving_the_written_config(path, report, report["closest"]):
        pass
