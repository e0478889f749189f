"""Several models in one process: each its own pool, CPUs split between them."""

from __future__ import annotations

import subprocess

import httpx2
import tritonclient.http as triton

from inferpool.harness.server import INFERPOOL, run_server, wait_ready

CONFIG = """
[[models]]
source = "tests.support.extra_models:affine"

[[models]]
source = "inferpool.engine.zoo.digits:build"
name = "digits-copy"
[models.runtime]
warmup_iters = 1
"""


def test_three_models_side_by_side(tmp_path, images, reference):
    config = tmp_path / "models.toml"
    config.write_text(CONFIG)
    with run_server(tmp_path, "--config", str(config)) as server:
        wait_ready(server)
        with httpx2.Client(base_url=server.url) as http:
            default = http.post("/predict", json={"inputs": images[0].tolist()}).json()
            copy = http.post("/predict/digits-copy", json={"inputs": images[0].tolist()}).json()
            affine = http.post("/predict/affine", json={"inputs": [[1.0, 2.0, 3.0]]}).json()
            unknown = http.post("/predict/resnet", json={"inputs": [1]})
            metrics = http.get("/metrics").text
        client = triton.InferenceServerClient(server.url.removeprefix("http://"))
        meta = client.get_model_metadata("affine")
        x = triton.InferInput("x", [2, 3], "FP32")
        x.set_data_from_numpy(images[0, 0, :2, :3].copy())
        y = client.infer("affine", [x]).as_numpy("y")
        client.close()
    assert default["model"] == "digits"
    assert default["outputs"]["label"] == copy["outputs"]["label"] == int(reference(images[:1])[1][0])
    assert affine == {"model": "affine", "outputs": {"y": [[3.0, 5.0, 7.0]]}}
    assert unknown.status_code == 404
    assert "'resnet' is not served here" in unknown.json()["error"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert (y == 2 * images[0, 0, :2, :3] + 1).all()
    for name in ("digits", "affine", "digits-copy"):  # 2 CPUs split 3 ways: one runtime each
        assert f'inferpool_runtimes{{model="{name}",version=""}} 1.0' in metrics


def test_two_models_with_one_name_fail_loudly(tmp_path):
    config = tmp_path / "dupe.toml"
    config.write_text('[[models]]\nsource = "inferpool.engine.zoo.digits:build"\n')
    result = subprocess.run(
        [INFERPOOL, "serve", "--port", "0", "--config", str(config)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "two models are named 'digits'; give one a distinct 'name' in the config" in result.stderr
