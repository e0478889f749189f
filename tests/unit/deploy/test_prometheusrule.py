"""deploy/monitoring/prometheusrule.yaml: alerts.yaml's rules as the Prometheus Operator's object."""

from __future__ import annotations

import yaml  # type: ignore[import-untyped]

from tests.support.kustomize import render as kustomize
from tests.support.prometheusrule import MONITORING, render


def test_the_committed_object_is_alerts_yaml_regenerated():
    committed = (MONITORING / "prometheusrule.yaml").read_text()
    regenerate = "python -m tests.support.prometheusrule > deploy/monitoring/prometheusrule.yaml"
    assert committed == render(), f"alerts.yaml changed: regenerate with `{regenerate}`"


def test_the_object_carries_every_alert_unchanged():
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    # The CRD requires spec.groups[].name and each rule's expr; alert rules need their name.
    assert rule["spec"]["groups"] == alerts["groups"]
    for group in rule["spec"]["groups"]:
        assert group["name"]
        for each in group["rules"]:
            assert each["alert"]
            assert each["expr"]


def test_monitoring_kustomization_applies_it():
    kinds = [doc["kind"] for doc in kustomize("monitoring")]
    assert kinds.count("PrometheusRule") == 1
