"""`inferpool tune --accuracy-cosine`: int8 tried at the best setting, never recommended when it
fails the gate (its strict server refuses to start), ranked as any trial when it passes."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import inferpool.cli.tune.measure
import inferpool.cli.tune.trials
from inferpool.cli.tune.budget import Budget
from inferpool.cli.tune.measure import WARMUP, placement
from inferpool.cli.tune.precision import int8_trial
from inferpool.cli.tune.progress import Progress
from inferpool.cli.tune.rank import DEFAULTS
from inferpool.cli.tune.space import Knobs
from inferpool.cli.tune.trials import Plan, Trial, Trials
from inferpool.config import load_settings
from inferpool.harness.load import Workload
from inferpool.harness.payloads import json_request
from tests.unit.cli.test_tune_confirmed import LOAD, FakeMachine

ORT = Knobs("onnxruntime", 1, 1, 1, "inline")


class GatedMachine(FakeMachine):
    """int8 servers run 2x; one whose gate fails refuses to start, as precision_strict does."""

    def __init__(self, gate_passes: bool) -> None:
        super().__init__({0, 1, 2, 3}, [1000.0, 1200.0, 2400.0])
        self.gate_passes = gate_passes
        self.commands: list[list[str]] = []

    @contextmanager
    def launch(self, command, *, name, ready_timeout, stop_timeout, cpus=None):  # type: ignore[no-untyped-def]
        argv = command(0)
        self.commands.append(argv)
        if "int8" in argv and not self.gate_passes:
            raise RuntimeError("model 'mlp': int8 fails the accuracy gate: min cosine 0.74 (needs 0.99)")
        with super().launch(command, name=name, ready_timeout=ready_timeout, stop_timeout=stop_timeout, cpus=cpus) as s:
            yield s

    def served(self, port: int, model: str) -> dict[str, object]:
        int8 = any("int8" in argv for argv in self.commands[-1:])
        return {"backend": "onnxruntime", "precision_selection": {"served": "int8"} if int8 else None}


def run_search(tmp_path, monkeypatch, gate_passes: bool) -> tuple[Trials, Trial, Trial | None]:
    fake = GatedMachine(gate_passes)
    monkeypatch.setattr(inferpool.cli.tune.trials, "launch", fake.launch)
    monkeypatch.setattr(inferpool.cli.tune.trials, "served_config", fake.served)
    monkeypatch.setattr(inferpool.cli.tune.measure, "run_load", fake.run_load)
    monkeypatch.setattr(os, "sched_setaffinity", fake.pin)
    settings = load_settings(None, ["--model", "inferpool.engine.zoo.mlp:build"])
    workload = Workload([json_request([0.0] * 64)], concurrency=LOAD.concurrency)
    plan = Plan(settings, [], "mlp", LOAD, workload, WARMUP, 2.0, placement([0, 1, 2, 3]), accuracy_cosine=0.99)
    budget = Budget(600, start=time.monotonic())
    trials = Trials(plan, budget, Progress(budget), tmp_path)
    assert trials.run(Trial(DEFAULTS, ORT), DEFAULTS, defaults=True)
    fp32 = Trial("#1", ORT)
    assert trials.run(fp32, "trial 1/1")
    return trials, fp32, int8_trial(trials, 2)


def test_int8_that_fails_the_gate_is_never_measured_nor_chosen(tmp_path, monkeypatch):
    trials, fp32, int8 = run_search(tmp_path, monkeypatch, gate_passes=False)
    assert int8 is not None
    assert int8.status.startswith("failed: ")
    assert "accuracy gate" in int8.status
    assert int8.summary is None
    assert trials.best is fp32
    trials.close()


def test_int8_that_passes_is_ranked_and_its_config_keeps_the_gate(tmp_path, monkeypatch):
    trials, _, int8 = run_search(tmp_path, monkeypatch, gate_passes=True)
    assert int8 is not None
    assert int8.summary is not None
    assert trials.best is int8
    assert int8.knobs.precision == "int8"
    flags = int8.knobs.flags()
    assert flags[flags.index("--runtime.accuracy-min-cosine") + 1] == "0.99"
    assert "--runtime.precision-strict" in flags
    assert int8.knobs.runtime()["precision_strict"] is True
    trials.close()


def test_without_the_flag_precision_is_not_searched(tmp_path, monkeypatch):
    fake = GatedMachine(True)
    monkeypatch.setattr(inferpool.cli.tune.trials, "launch", fake.launch)
    monkeypatch.setattr(inferpool.cli.tune.trials, "served_config", fake.served)
    monkeypatch.setattr(inferpool.cli.tune.measure, "run_load", fake.run_load)
    settings = load_settings(None, ["--model", "inferpool.engine.zoo.mlp:build"])
    workload = Workload([json_request([0.0] * 64)], concurrency=LOAD.concurrency)
    budget = Budget(600, start=time.monotonic())
    trials = Trials(Plan(settings, [], "mlp", LOAD, workload, WARMUP, 2.0, accuracy_cosine=None), budget,
                    Progress(budget), tmp_path)  # fmt: skip
    assert trials.run(Trial(DEFAULTS, ORT), DEFAULTS, defaults=True)
    assert int8_trial(trials, 2) is None
    assert len(fake.commands) == 1  # the defaults only
    trials.close()
