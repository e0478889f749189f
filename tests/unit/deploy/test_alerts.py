"""deploy/monitoring/alerts.yaml: ``promtool check rules`` and ``promtool test rules`` on
tests/unit/deploy/alerts_test.yaml, whose scenarios fire every alert and hold each one back just
under its threshold. The runbook annotations are written once, in the rule file: the driver
copies them into the expected alerts (``$labels`` substituted) before promtool compares."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "monitoring" / "alerts.yaml"
TESTS = Path(__file__).with_name("alerts_test.yaml")
PROMTOOL = shutil.which("promtool", path=str(Path(sys.executable).parent)) or shutil.which("promtool")
METRICS_DOC = REPO / "docs" / "metrics.md"


def _alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _render(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool is missing: `make test` extracts it from Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def test_rule_file_is_valid():
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_severity_and_real_metrics():
    documented = set(re.findall(r"`(inferpool_\w+)", METRICS_DOC.read_text()))
    for name, rule in _alerts().items():
        assert rule["annotations"]["runbook"].strip(), name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["labels"]["severity"] in {"page", "warning", "info"}, name
        used = set(re.findall(r"\b(inferpool_\w+?)(?:_bucket)?\b", rule["expr"]))
        assert used, name
        assert used <= documented, (name, used - documented)


def _filled(tests: dict) -> dict:
    alerts = _alerts()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            annotations = alerts[check["alertname"]]["annotations"]
            for expected in check["exp_alerts"]:
                labels = {**expected["exp_labels"], "alertname": check["alertname"]}
                expected["exp_annotations"] = {k: _render(v, labels) for k, v in annotations.items()}
    tests["rule_files"] = [str(RULES)]
    return tests


def _matches(series: str, labels: dict[str, str]) -> bool:
    return all(f'{k}="{v}"' in series for k, v in labels.items() if k in {"job", "instance"})


def test_every_alert_is_tested_firing_and_not_firing():
    """Each alert fires somewhere, and is held back somewhere: at an earlier time (``for``), or
    on series of the same scenario that stay under the threshold (no expected alert has their
    job and instance)."""
    fired: set[str] = set()
    held: set[str] = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        series = [item["series"] for item in case["input_series"]]
        for check in case["alert_rule_test"]:
            expected = [e["exp_labels"] for e in check["exp_alerts"]]
            if not expected or any(not any(_matches(s, labels) for labels in expected) for s in series):
                held.add(check["alertname"])
            if expected:
                fired.add(check["alertname"])
    assert fired == set(_alerts()), set(_alerts()) - fired
    assert held == set(_alerts()), set(_alerts()) - held


def test_promtool_unit_tests_pass(tmp_path):
    filled = tmp_path / "alerts_test.yaml"
    filled.write_text(yaml.safe_dump(_filled(yaml.safe_load(TESTS.read_text()))))
    result = _promtool("test", "rules", str(filled))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_can_fail(tmp_path):
    # The same scenarios against a threshold moved out of reach: the firing checks must fail.
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["expr"] = f"({rule['expr']}) and on() vector(0) > 1"
    broken = tmp_path / "alerts.yaml"
    broken.write_text(yaml.safe_dump(rules))
    tests = _filled(yaml.safe_load(TESTS.read_text()))
    tests["rule_files"] = [str(broken)]
    filled = tmp_path / "alerts_test.yaml"
    filled.write_text(yaml.safe_dump(tests))
    result = _promtool("test", "rules", str(filled))
    assert result.returncode != 0
    for name in _alerts():
        assert name in result.stdout + result.stderr, name


@pytest.mark.parametrize("name", sorted(_alerts()))
def test_alert_is_documented(name):
    assert f"`{name}`" in (REPO / "docs" / "deploy.md").read_text()
