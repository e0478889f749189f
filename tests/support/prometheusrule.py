"""deploy/monitoring/prometheusrule.yaml from alerts.yaml: the same groups as a Prometheus Operator
``PrometheusRule``, so that the rules are written once (alerts.yaml, which promtool tests) and the
Operator's object can never drift from them (tests/unit/deploy/test_prometheusrule.py).

Regenerate after editing alerts.yaml:
    python -m tests.support.prometheusrule > deploy/monitoring/prometheusrule.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
HEADER = """\
# GENERATED from alerts.yaml by `python -m tests.support.prometheusrule > deploy/monitoring/prometheusrule.yaml`:
# edit alerts.yaml (promtool tests it), then regenerate; a test fails when the two differ.
# For a Prometheus Operator (CRD monitoring.coreos.com/v1): kube-prometheus-stack's Prometheus selects
# rules by its release label; match your Prometheus' ruleSelector.
"""


def rule_object() -> dict[str, Any]:
    groups = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "inferpool", "labels": {"app.kubernetes.io/name": "inferpool", "release": "prometheus"}},
        "spec": {"groups": groups},
    }


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    """Multi-line strings (the rules' expressions) as literal blocks, as alerts.yaml writes them."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _string)


def render() -> str:
    dumped = yaml.dump(rule_object(), Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return HEADER + dumped


if __name__ == "__main__":
    sys.stdout.write(render())
