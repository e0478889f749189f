"""The KServe ServingRuntime's container environment (deploy/kserve/servingruntime.yaml) really
serves what KServe downloads to /mnt/models under the InferenceService's name: a real
``inferpool serve`` with exactly that environment (the Downward-API value resolved from the CPU
limit; /mnt/models replaced by a temporary folder laid out as docs/deploy.md tells) answers
KServe's v2 readiness and inference paths for the name in deploy/kserve/inferenceservice.yaml."""

from __future__ import annotations

import math
import shutil

import httpx2
import numpy as np
import yaml  # type: ignore[import-untyped]

from inferpool.harness.server import inferpool_serve, launch, wait_ready
from tests.support.kustomize import DEPLOY


def _runtime_env(container: dict) -> dict[str, str]:
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            assert item["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"
            env[item["name"]] = str(math.ceil(float(container["resources"]["limits"]["cpu"])))
    return env


def test_runtime_environment_serves_the_inference_service_by_name(tmp_path, digits_pt2, images):
    runtime = yaml.safe_load((DEPLOY / "kserve" / "servingruntime.yaml").read_text())
    isvc = yaml.safe_load((DEPLOY / "kserve" / "inferenceservice.yaml").read_text())
    container = runtime["spec"]["containers"][0]
    env = _runtime_env(container)
    assert env.pop("INFERPOOL_MODEL_REPOSITORY") == "/mnt/models"
    name = isvc["metadata"]["name"]
    mnt = tmp_path / "mnt-models"
    (mnt / name / "1").mkdir(parents=True)
    shutil.copy(digits_pt2, mnt / name / "1" / "model.pt2")
    env["INFERPOOL_MODEL_REPOSITORY"] = str(mnt)

    with launch(inferpool_serve(), tmp_path, ready_path="/health/live", ready_answer=None, env=env) as server:
        wait_ready(server, timeout=120)
        with httpx2.Client(base_url=server.url, timeout=30) as http:
            assert http.get(container["readinessProbe"]["httpGet"]["path"]).status_code == 200
            assert http.get(f"/v2/models/{name}/ready").status_code == 200
            batch = images[:2]
            body = {
                "inputs": [
                    {"name": "image", "shape": list(batch.shape), "datatype": "FP32", "data": batch.ravel().tolist()}
                ]
            }
            response = http.post(f"/v2/models/{name}/infer", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["model_name"] == name
            outputs = {o["name"]: o for o in response.json()["outputs"]}
            assert outputs, response.text
            assert np.isfinite(np.concatenate([np.asarray(o["data"], dtype=float) for o in outputs.values()])).all()
