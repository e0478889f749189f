"""The digits CNN as a model of Triton's Python backend: it runs inside the backend's stub process
(one per instance), on onnxruntime with the serving options InferPool's no-flag path uses.
``loadtest/peers/triton_digits.py`` lays out the model repository whose ``model.py`` imports this
class; the ONNX file is named by ``TRITON_DIGITS_ONNX`` (InferPool's own export of the model).

Triton's dynamic batcher hands ``execute`` every request it gathered; they run as one batch and
each gets its own rows back: ``probabilities`` ``[n, 10]`` and ``label`` ``[n, 1]`` (Triton wants
one dimension per batched sample; InferPool's ``label`` is ``[n]``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from loadtest.peers.onnx_session import session

ONNX_ENV = "TRITON_DIGITS_ONNX"


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        # The stub's own module, there only inside it (the launcher imports this file for ONNX_ENV).
        import triton_python_backend_utils  # type: ignore[import-not-found]

        self.pb = triton_python_backend_utils
        self.session = session(os.environ[ONNX_ENV])
        self.input_name = self.session.get_inputs()[0].name

    def execute(self, requests: list[Any]) -> list[Any]:
        images = [self.pb.get_input_tensor_by_name(request, "image").as_numpy() for request in requests]
        probabilities, label = self.session.run(["probabilities", "label"], {self.input_name: np.concatenate(images)})
        responses, start = [], 0
        for image in images:
            rows = slice(start, start + len(image))
            outputs = [self.pb.Tensor("probabilities", probabilities[rows]),
                       self.pb.Tensor("label", label[rows].reshape(-1, 1))]  # fmt: skip
            responses.append(self.pb.InferenceResponse(output_tensors=outputs))
            start += len(image)
        return responses
