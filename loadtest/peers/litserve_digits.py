"""LitServe serving the digits CNN (same weights), for loadtest.compare. Runs in its own venv:

    python3 -m venv /tmp/venv-litserve && /tmp/venv-litserve/bin/pip install torch==2.13.0 litserve
    PYTHONPATH=. /tmp/venv-litserve/bin/python loadtest/peers/litserve_digits.py --port 8002 \\
        [--workers 1] [--max-batch-size 8 --batch-timeout 0.001]

Same request and response as InferPool's ``POST /predict`` for one sample; the model runs under
``torch.inference_mode()`` with 1 intra-op thread in each LitServe inference worker process.
Health at ``/health``. 127.0.0.1 only. ``--max-batch-size N`` turns on LitServe's own dynamic
batching (``LitAPI(max_batch_size, batch_timeout)``: its default ``batch`` stacks the decoded
samples, ``unbatch`` splits the list ``predict`` returns); with it, send one sample per request.
"""

import argparse
from typing import Any

import litserve as ls  # type: ignore[import-not-found]
import torch

from inferpool.engine.zoo.digits import WEIGHTS, DigitsCNN


class DigitsAPI(ls.LitAPI):  # type: ignore[misc]
    def setup(self, device: str) -> None:
        torch.set_num_threads(1)
        model = DigitsCNN()
        model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
        self.model = model.eval()

    def decode_request(self, request: dict) -> torch.Tensor:  # LitServe reads this annotation: no __future__
        # One sample stays [1, 8, 8], so that LitServe's batching can stack samples into [B, 1, 8, 8].
        return torch.tensor(request["inputs"], dtype=torch.float32)

    def predict(self, x: torch.Tensor) -> list[dict[str, Any]]:
        with torch.inference_mode():
            probabilities, label = self.model(x.unsqueeze(0) if x.dim() == 3 else x)
        pairs = zip(probabilities.tolist(), label.tolist(), strict=True)
        return [{"probabilities": p, "label": int(n)} for p, n in pairs]

    def encode_response(self, output: list[dict[str, Any]] | dict[str, Any]) -> dict[str, Any]:
        # Unbatched: predict's whole list; batched: LitServe's unbatch already gave one row.
        row = output[0] if isinstance(output, list) and len(output) == 1 else output
        return {"model": "digits", "outputs": row}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--batch-timeout", type=float, default=0.001, help="seconds a batch may wait to fill")
    args = parser.parse_args()
    api = DigitsAPI(max_batch_size=args.max_batch_size, batch_timeout=args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=args.workers)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
