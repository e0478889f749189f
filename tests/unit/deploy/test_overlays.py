"""deploy/'s kustomize layout: what each overlay adds to the base, and that every file is used."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from inferpool.config import load_settings
from tests.support.kustomize import DEPLOY, OVERLAYS, kustomization, render

REPO = DEPLOY.parent


def _kind(directory: str, kind: str) -> list[dict]:
    return [doc for doc in render(directory) if doc["kind"] == kind]


def _env(deployment: dict) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _referenced(directory: Path) -> set[Path]:
    """Files a kustomization names (resources, patches, generators), followed into directories."""
    spec = kustomization(directory)
    named = [*spec.get("resources", []), *(p["path"] for p in spec.get("patches", []) if "path" in p)]
    for generator in spec.get("configMapGenerator", []):
        named += [item.split("=", 1)[-1] for item in generator.get("files", [])]
    found = {directory / "kustomization.yaml"}
    for item in named:
        path = (directory / item).resolve()
        found |= _referenced(path) if path.is_dir() else {path}
    return found


def test_every_file_under_deploy_is_used():
    used: set[Path] = set()
    for directory in [*(f"overlays/{name}" for name in OVERLAYS), "monitoring"]:
        used |= _referenced(DEPLOY / directory)
    files = {p.resolve() for p in DEPLOY.rglob("*") if p.is_file() and p.parent.name != "kserve"}
    assert files - used == set()


def test_dev_is_one_replica_without_autoscaling():
    (deployment,) = _kind("overlays/dev", "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert not _kind("overlays/dev", "HorizontalPodAutoscaler")
    assert not _kind("overlays/dev", "PodDisruptionBudget")


@pytest.mark.parametrize("overlay", ["production", "minilm"])
def test_production_overlays_autoscale_and_protect_their_own_deployment(overlay):
    directory = f"overlays/{overlay}"
    (deployment,) = _kind(directory, "Deployment")
    (hpa,) = _kind(directory, "HorizontalPodAutoscaler")
    (pdb,) = _kind(directory, "PodDisruptionBudget")
    (service,) = _kind(directory, "Service")
    assert "replicas" not in deployment["spec"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _env(deployment)["INFERPOOL_DRAIN_SECONDS"] == "10"
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30


def test_minilm_is_a_separate_release_beside_production():
    production = {(d["kind"], d["metadata"]["name"]) for d in render("overlays/production")}
    minilm = {(d["kind"], d["metadata"]["name"]) for d in render("overlays/minilm")}
    assert production.isdisjoint(minilm), "both can run in one namespace"
    (deployment,) = _kind("overlays/minilm", "Deployment")
    (other,) = _kind("overlays/production", "Deployment")
    # Selectors must not overlap: neither release's Service, PDB or HPA may take the other's pods.
    for mine, theirs in (("production", other), ("minilm", deployment)):
        pods = theirs["spec"]["template"]["metadata"]["labels"]
        for doc in render(f"overlays/{'minilm' if mine == 'production' else 'production'}"):
            selector = doc["spec"].get("selector", {})
            selector = selector.get("matchLabels", selector)
            if selector:
                assert not selector.items() <= pods.items(), (doc["kind"], selector, pods)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.1.0-minilm")
    assert other["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.1.0")


def test_minilm_environment_is_config_minilm_toml(monkeypatch):
    (deployment,) = _kind("overlays/minilm", "Deployment")
    for name, value in _env(deployment).items():
        monkeypatch.setenv(name, value)
    from_env = load_settings()
    for name in list(_env(deployment)):
        monkeypatch.delenv(name)
    from_file = load_settings(REPO / "config" / "minilm.toml")
    toml = tomllib.loads((REPO / "config" / "minilm.toml").read_text())
    for key in set(toml) - {"host", "port", "runtime"}:
        assert getattr(from_env, key) == getattr(from_file, key), key
    for key in toml["runtime"]:
        assert getattr(from_env.runtime, key) == getattr(from_file.runtime, key), key
