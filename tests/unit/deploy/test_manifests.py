"""deploy/: the Kubernetes manifests, rendered with ``kubectl kustomize`` (deploy/base plus the
overlays deploy/overlays/{dev,production,minilm}, and deploy/monitoring) and validated offline.

Built-in kinds are validated with kubernetes-validate (bundled OpenAPI-derived JSON schemas)
in strict mode, which rejects unknown fields, for the oldest Kubernetes version these
manifests support (1.33) and the newest the installed package knows. kubernetes-validate has
no schemas for custom resources: the ServiceMonitor (Prometheus Operator) is checked here for
the fields its CRD requires and for consistency with the rest; the KServe ServingRuntime and
InferenceService are checked against the KServe SDK's models in tests/unit/deploy/test_kserve.py.
The consistency checks below run on the production overlay; every overlay gets the strict
validation, the CPU budget and the shutdown timeline (tests/unit/deploy/test_overlays.py has the
checks particular to each overlay).
"""

from __future__ import annotations

import copy
import math
from decimal import Decimal
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from inferpool.config import load_settings
from inferpool.engine import ConfigError
from inferpool.engine.plan.threads import plan_threads
from inferpool.service.models.host import settings_shares, sized
from tests.support.kustomize import DEPLOY, OVERLAYS, render

REPO = Path(__file__).resolve().parents[3]
VERSIONS = ["1.33", kubernetes_validate.latest_version()]
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "InferenceService", "ServingRuntime"}
INFLIGHT = "inferpool_inflight_requests"
MARGIN_SECONDS = 5


def _load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# What `kubectl apply -k` gets from each kustomization, and the KServe files (applied as they are).
MANIFESTS = {
    **{f"overlays/{name}": list(render(f"overlays/{name}")) for name in OVERLAYS},
    "monitoring": list(render("monitoring")),
    **{path.relative_to(DEPLOY).as_posix(): _load(path) for path in sorted((DEPLOY / "kserve").glob("*.yaml"))},
}
RESOURCES = [(name, doc) for name, docs in MANIFESTS.items() for doc in docs]
# The consistency checks: production, its monitoring, KServe.
CHECKED = [(n, d) for n, d in RESOURCES if n in {"overlays/production", "monitoring"} or n.startswith("kserve/")]
DEPLOYMENTS = [(n, d) for n, d in RESOURCES if d["kind"] == "Deployment"]


def _one(kind: str) -> dict:
    found = [doc for _, doc in CHECKED if doc["kind"] == kind and not _generated(doc)]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _generated(doc: dict) -> bool:
    """The ConfigMaps deploy/monitoring generates from the dashboard and the alert rules."""
    return doc["kind"] == "ConfigMap" and doc["metadata"]["name"].startswith("inferpool-")


def _container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "inferpool")


def _env(container: dict) -> dict[str, dict]:
    return {item["name"]: item for item in container["env"]}


def _cpus(quantity: str) -> Decimal:
    return Decimal(quantity[:-1]) / 1000 if quantity.endswith("m") else Decimal(quantity)


def _resolve_env(container: dict) -> dict[str, str]:
    """The environment the kubelet gives the container (values and resourceFieldRefs)."""
    env = {}
    for name, item in _env(container).items():
        if "value" in item:
            env[name] = item["value"]
            continue
        ref = item["valueFrom"]["resourceFieldRef"]
        assert ref["resource"] == "limits.cpu", ref
        # The Downward API rounds up to a whole multiple of the divisor.
        env[name] = str(math.ceil(_cpus(container["resources"]["limits"]["cpu"]) / _cpus(ref.get("divisor", "1"))))
    return env


def test_every_manifest_parses_and_names_its_resources():
    kinds = {name: sorted(doc["kind"] for doc in docs) for name, docs in MANIFESTS.items()}
    assert kinds["overlays/dev"] == ["Deployment", "Service"]
    assert kinds["overlays/production"] == ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]
    assert kinds["overlays/minilm"] == kinds["overlays/production"]
    assert kinds["monitoring"] == ["ConfigMap", "ConfigMap", "ConfigMap", "PrometheusRule", "ServiceMonitor"]
    assert "kserve/inferenceservice.yaml" in kinds
    for name, doc in RESOURCES:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), name
        assert doc["metadata"]["name"], name


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "doc"), RESOURCES, ids=[f"{n}:{d['kind']}" for n, d in RESOURCES])
def test_builtin_kinds_validate_strictly(name, doc, version):
    if doc["kind"] in CRD_KINDS:
        # Stated, not assumed: the package really cannot validate these (checked by hand below).
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, version, strict=True)
        return
    assert kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_catches_mistakes():
    deployment = copy.deepcopy(_one("Deployment"))
    _container(deployment)["livenessProbes"] = _container(deployment).pop("livenessProbe")  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)
    hpa = copy.deepcopy(_one("HorizontalPodAutoscaler"))
    hpa["spec"]["minReplicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(hpa, VERSIONS[0], strict=True)


@pytest.mark.parametrize(("name", "deployment"), DEPLOYMENTS, ids=[n for n, _ in DEPLOYMENTS])
def test_cpu_requests_equal_whole_cpu_limits_and_drive_the_thread_budget(monkeypatch, name, deployment):
    container = _container(deployment)
    resources = container["resources"]
    assert resources["requests"] == resources["limits"], "Guaranteed QoS: requests = limits"
    limit = _cpus(resources["limits"]["cpu"])
    assert limit == int(limit) >= 1, "whole CPUs: the Downward API rounds fractional limits up"

    ref = _env(container)["INFERPOOL_WORKERS"]["valueFrom"]["resourceFieldRef"]
    assert ref == {"containerName": "inferpool", "resource": "limits.cpu", "divisor": "1"}
    env = _resolve_env(container)
    assert env["INFERPOOL_RUNTIME__NUM_RUNTIMES"] == "1"
    assert env["INFERPOOL_RUNTIME__INTRA_OP_THREADS"] == "1"

    # The service reads exactly these variables: processes x runtimes x threads fits the quota.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = sized(load_settings(), cpus=math.floor(limit))
    assert settings.workers == int(limit)
    plan = plan_threads(settings.runtime, cpus=math.floor(limit), shares=settings_shares(settings))
    assert plan.threads * settings.workers == int(limit)

    # Why whole CPUs: a 1500m limit gives WORKERS=2 on a 1.5-CPU quota, which the server
    # refuses (it counts floor(1.5) = 1 usable CPU).
    fractional = copy.deepcopy(container)
    fractional["resources"]["limits"]["cpu"] = "1500m"
    monkeypatch.setenv("INFERPOOL_WORKERS", _resolve_env(fractional)["INFERPOOL_WORKERS"])
    with pytest.raises(ConfigError, match="lower workers"):
        sized(load_settings(), cpus=1)


@pytest.mark.parametrize(("name", "deployment"), DEPLOYMENTS, ids=[n for n, _ in DEPLOYMENTS])
def test_probes_and_shutdown_timeline(name, deployment):
    pod = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    assert container["startupProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "room for loading a real model"
    ports = {p["name"] for p in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in ports

    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    drain = int(_resolve_env(container)["INFERPOOL_DRAIN_SECONDS"])
    grace = pod["terminationGracePeriodSeconds"]
    if name != "overlays/dev":  # a replica behind a Service that is scaled and drained
        assert pre_stop >= 1
        assert drain >= 10
    assert grace >= pre_stop + drain + MARGIN_SECONDS, (grace, pre_stop, drain)
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pod_runs_as_the_images_non_root_user():
    dockerfile = (REPO / "Dockerfile").read_text()
    pod = _one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    uid = pod["securityContext"]["runAsUser"]
    assert f"USER {uid}:" in dockerfile or f"USER {uid}\n" in dockerfile


def test_service_selects_the_pods_and_their_port():
    deployment, service = _one("Deployment"), _one("Service")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in _container(deployment)["ports"]}
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])


def test_hpa_scales_the_deployment_on_inflight_per_pod_with_cpu_fallback():
    hpa, deployment = _one("HorizontalPodAutoscaler"), _one("Deployment")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        deployment["apiVersion"],
        "Deployment",
        deployment["metadata"]["name"],
    )
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert hpa["spec"]["minReplicas"] >= 2
    kinds = {m["type"]: m for m in hpa["spec"]["metrics"]}
    pods = kinds["Pods"]["pods"]
    assert pods["metric"]["name"] == INFLIGHT
    assert pods["target"]["type"] == "AverageValue"
    assert kinds["Resource"]["resource"]["name"] == "cpu"


def test_adapter_rule_exposes_the_hpa_metric_per_pod():
    adapter = _one("ConfigMap")
    config = yaml.safe_load(adapter["data"]["config.yaml"])
    hpa_metric = next(
        m["pods"]["metric"]["name"] for m in _one("HorizontalPodAutoscaler")["spec"]["metrics"] if m["type"] == "Pods"
    )
    rules = [r for r in config["rules"] if INFLIGHT in r["seriesQuery"]]
    assert len(rules) == 1
    rule = rules[0]
    assert rule["name"]["as"] == hpa_metric
    overrides = rule["resources"]["overrides"]
    assert overrides["pod"] == {"resource": "pod"}
    assert overrides["namespace"] == {"resource": "namespace"}
    assert "<<.Series>>" in rule["metricsQuery"]
    assert "<<.LabelMatchers>>" in rule["metricsQuery"]
    assert "by (<<.GroupBy>>)" in rule["metricsQuery"]


def test_service_monitor_scrapes_the_service_metrics_port():
    # CRD monitoring.coreos.com/v1: not validated by kubernetes-validate; required: spec.endpoints
    # and spec.selector, plus consistency with the Service.
    monitor, service = _one("ServiceMonitor"), _one("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in service_ports
        assert endpoint.get("path", "/metrics") == "/metrics"
    annotations = _one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
