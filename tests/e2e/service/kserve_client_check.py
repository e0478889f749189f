"""Run by tests/e2e/service/test_kserve_client.py with the KServe SDK's own venv (.venv-kserve):
its v2 REST client, unmodified, against a running InferPool. Prints what it saw as JSON.

    python kserve_client_check.py BASE_URL IMAGES.npy
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig


async def main(base: str, images: np.ndarray) -> dict[str, object]:
    client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))
    seen: dict[str, object] = {
        "live": await client.is_server_live(base),
        "ready": await client.is_server_ready(base),
        "model_ready": await client.is_model_ready(base, "digits"),
    }
    for binary in (False, True):
        for batch in (1, len(images)):
            tensor = InferInput("image", [batch, 1, 8, 8], "FP32")
            tensor.set_data_from_numpy(images[:batch], binary_data=binary)
            request = InferRequest(model_name="digits", infer_inputs=[tensor], request_id=f"k-{binary}-{batch}")
            response = await client.infer(base, request, model_name="digits")
            outputs = {o.name: o.as_numpy().tolist() for o in response.outputs}
            seen[f"{'binary' if binary else 'json'}-{batch}"] = {"id": response.id, **outputs}
    wrong = InferInput("image", [1, 64], "FP32")
    wrong.set_data_from_numpy(images[:1].reshape(1, 64))
    try:
        await client.infer(base, InferRequest(model_name="digits", infer_inputs=[wrong]), model_name="digits")
        seen["error"] = None
    except Exception as exc:  # noqa: BLE001 -- whatever the SDK raises, its text is the evidence
        seen["error"] = f"{type(exc).__name__}: {exc}"
    await client.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], np.load(sys.argv[2])))))
