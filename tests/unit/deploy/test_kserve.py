"""deploy/kserve: the ServingRuntime and the InferenceService that uses it.

kubernetes-validate has no schemas for KServe's CRDs, the KServe SDK ships no CRD YAML, and
there is no offline package with the published CRDs: the documents are checked against the
SDK's generated models instead (kserve.models.V1alpha1ServingRuntime,
V1beta1InferenceService, ... and the kubernetes client's core models inside them), which mirror
the CRDs' OpenAPI schema: field names, types, required fields. The SDK lives in .venv-kserve
(`make test`), so the check runs there (tests/unit/deploy/kserve_schema_check.py). The runtime's
container is also validated strictly as a core/v1 Pod, and both are checked for what KServe
needs to pair them.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from tests.support.kustomize import DEPLOY, render

REPO = DEPLOY.parent
KSERVE_PYTHON = REPO / ".venv-kserve" / "bin" / "python"
CHECK = Path(__file__).with_name("kserve_schema_check.py")
RUNTIME = DEPLOY / "kserve" / "servingruntime.yaml"
ISVC = DEPLOY / "kserve" / "inferenceservice.yaml"


def _doc(path: Path) -> dict:
    loaded: dict = yaml.safe_load(path.read_text())
    return loaded


def _problems(*paths: Path) -> list[str]:
    assert KSERVE_PYTHON.exists(), "the KServe SDK venv is missing: `make test` creates .venv-kserve"
    result = subprocess.run(
        [str(KSERVE_PYTHON), str(CHECK), *map(str, paths)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    problems: list[str] = json.loads(result.stdout)
    return problems


def test_both_fit_the_kserve_sdk_models():
    assert _problems(RUNTIME, ISVC) == []


@pytest.mark.parametrize(
    ("path", "where", "change", "expected"),
    [
        (RUNTIME, ("spec",), {"supportedModelFormat": []}, "spec.supportedModelFormat: no such field"),
        (RUNTIME, ("spec",), {"protocolVersions": "v2"}, "spec.protocolVersions: expected a list"),
        (RUNTIME, ("spec", "containers", 0), {"livenessProbes": {}}, "livenessProbes: no such field in V1Container"),
        (ISVC, ("spec", "predictor"), {"minReplicas": "two"}, "minReplicas: expected int"),
        (ISVC, ("spec", "predictor", "model"), {"modelFormat": None}, "model_format"),
    ],
)
def test_the_check_catches_mistakes(tmp_path, path, where, change, expected):
    doc = copy.deepcopy(_doc(path))
    node = doc
    for key in where:
        node = node[key]
    for key, value in change.items():
        if value is None:
            del node[key]
        else:
            node[key] = value
    broken = tmp_path / path.name
    broken.write_text(yaml.safe_dump(doc))
    problems = _problems(broken)
    assert any(expected in problem for problem in problems), problems


def test_runtime_serves_pytorch_and_onnx_over_v2():
    runtime = _doc(RUNTIME)
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"pytorch", "onnx"}
    assert all(f["autoSelect"] for f in spec["supportedModelFormats"])
    assert spec["protocolVersions"] == ["v2"]
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"
    deployment = next(d for d in render("overlays/production") if d["kind"] == "Deployment")
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PROTOCOL"]["value"] == "v2"
    assert env["INFERPOOL_MODEL_REPOSITORY"]["value"] == "/mnt/models"  # where KServe puts storageUri
    # Sized by the server from the quota: the default model is served beside the repository's.
    assert "INFERPOOL_WORKERS" not in env
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["ports"][0]["containerPort"] == int(env["INFERPOOL_PORT"]["value"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == container["ports"][0]["containerPort"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runtime-check"},
        "spec": {"containers": [container]},
    }
    kubernetes_validate.validate(pod, "1.33", strict=True)


def test_inference_service_uses_the_runtime():
    isvc, runtime = _doc(ISVC), _doc(RUNTIME)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["storageUri"]
    assert model["resources"]["requests"] == model["resources"]["limits"]
    assert 2 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    container = runtime["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert predictor["terminationGracePeriodSeconds"] >= pre_stop + int(env["INFERPOOL_DRAIN_SECONDS"]) + 5
    assert predictor["securityContext"]["runAsUser"] == container["securityContext"]["runAsUser"]
