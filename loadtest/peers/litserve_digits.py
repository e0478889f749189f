"""LitServe serving the digits CNN (same weights), for loadtest.compare. Runs in its own venv:

    python3 -m venv /tmp/venv-litserve && /tmp/venv-litserve/bin/pip install torch==2.13.0 litserve
    PYTHONPATH=. /tmp/venv-litserve/bin/python loadtest/peers/litserve_digits.py --port 8002 \\
        [--workers 1]

Same request and response as InferPool's ``POST /predict`` for one sample; the model runs under
``torch.inference_mode()`` with 1 intra-op thread in each LitServe inference worker process.
Health at ``/health``. 127.0.0.1 only. LitServe's batching is not wired up here (not run).
"""

import argparse
from typing import Any

import litserve as ls  # type: ignore[import-not-found]
import torch

from engine.zoo.digits import WEIGHTS, DigitsCNN


class DigitsAPI(ls.LitAPI):  # type: ignore[misc]
    def setup(self, device: str) -> None:
        torch.set_num_threads(1)
        model = DigitsCNN()
        model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
        self.model = model.eval()

    def decode_request(self, request: dict) -> torch.Tensor:  # LitServe reads this annotation: no __future__
        x = torch.tensor(request["inputs"], dtype=torch.float32)
        return x.unsqueeze(0) if x.dim() == 3 else x

    def predict(self, x: torch.Tensor) -> list[dict[str, Any]]:
        with torch.inference_mode():
            probabilities, label = self.model(x)
        pairs = zip(probabilities.tolist(), label.tolist(), strict=True)
        return [{"probabilities": p, "label": int(n)} for p, n in pairs]

    def encode_response(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": "digits", "outputs": output[0] if len(output) == 1 else output}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    server = ls.LitServer(DigitsAPI(), accelerator="cpu", workers_per_device=args.workers)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
