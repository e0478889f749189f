"""Pre-built requests: ``POST /predict`` JSON and v2 infer, JSON or binary tensor data (Triton's
extension), from arrays; and the named samples of the built-in models that the load tests send.

A ``Payload`` is encoded once and sent many times, so that a client measuring a round trip
spends nothing on the request inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

HEADER_LENGTH = "inference-header-content-length"  # the v2 binary extension's JSON header size
JSON = ("content-type", "application/json")
BINARY = ("content-type", "application/octet-stream")

Tensor = npt.NDArray[Any] | Sequence[str]
"""A v2 input: an array, or a list of strings (``BYTES``)."""


@dataclass(frozen=True)
class Payload:
    """What to send: a path, a body and extra headers (the host comes from the connection)."""

    path: str
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    method: str = "POST"
    variants: tuple[bytes, ...] = ()
    """Further bodies that wrk sends in turn with ``body`` (a mixed workload, e.g. texts of many
    lengths); other generators send ``body`` alone."""

    def encode(self, host: str, port: int) -> bytes:
        """The whole HTTP/1.1 request, ready to write to a keep-alive connection."""
        lines = [f"{self.method} {self.path} HTTP/1.1", f"host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if self.body or self.method == "POST":
            lines.append(f"content-length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def json_request(inputs: object, path: str = "/predict") -> Payload:
    """``POST /predict`` with ``{"inputs": ...}``: numpy arrays go as nested lists."""
    return Payload(path, orjson.dumps({"inputs": inputs}, option=orjson.OPT_SERIALIZE_NUMPY), (JSON,))


def v2_request(
    model: str,
    inputs: Mapping[str, Tensor],
    outputs: Sequence[str] | None = None,
    *,
    binary: bool = True,
    **parameters: object,
) -> Payload:
    """v2 infer of ``inputs``, as binary tensor data or, with ``binary=False``, as JSON ``data``.
    ``outputs`` names the outputs to ask for, each binary when the inputs are; without them the
    server answers every output (all binary, by the ``binary_data_output`` parameter, when the
    inputs are). ``parameters`` are the request's own (``timeout=5``)."""
    tensors, chunks = zip(*(_tensor(name, value, binary) for name, value in inputs.items()), strict=True)
    header: dict[str, Any] = {"inputs": list(tensors)}
    if outputs is not None:
        header["outputs"] = [{"name": name, "parameters": {"binary_data": binary}} for name in outputs]
    elif binary:
        parameters = {"binary_data_output": True, **parameters}
    if parameters:
        header["parameters"] = parameters
    body = orjson.dumps(header)
    path = f"/v2/models/{model}/infer"
    if not binary:
        return Payload(path, body, (JSON,))
    return Payload(path, body + b"".join(chunks), (BINARY, (HEADER_LENGTH, str(len(body)))))


def embeddings_request(model: str, inputs: str | Sequence[str], encoding_format: str = "float") -> Payload:
    """``POST /v1/embeddings`` (OpenAI's API) of one text or a list of them."""
    body = {"model": model, "input": inputs, "encoding_format": encoding_format}
    return Payload("/v1/embeddings", orjson.dumps(body), (JSON,))


def grpc_request(model: str, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str] = ()) -> bytes:
    """A serialised gRPC ModelInferRequest of ``inputs`` as raw contents (as Triton's client
    sends them), to send as bytes on a channel with no serializer."""
    from inferpool.service.grpc import inference_pb2 as pb  # the messages only: no torch, no server

    request = pb.ModelInferRequest(model_name=model)
    for name, value in inputs.items():
        array = np.ascontiguousarray(value)
        request.inputs.add(name=name, datatype=_datatype(array.dtype), shape=array.shape)
        request.raw_input_contents.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


def _tensor(name: str, value: Tensor, binary: bool) -> tuple[dict[str, Any], bytes]:
    """An input's entry in the JSON header, and its binary data (none unless ``binary``)."""
    if isinstance(value, np.ndarray):
        tensor: dict[str, Any] = {"name": name, "shape": list(value.shape), "datatype": _datatype(value.dtype)}
        data: list[Any] | None = None if binary else value.reshape(-1).tolist()
        raw = np.ascontiguousarray(value).tobytes() if binary else b""
    else:  # BYTES, laid out as Triton does: each element a 4-byte little-endian length, then its bytes
        data = list(value)
        tensor = {"name": name, "shape": [len(data)], "datatype": "BYTES"}
        encoded = [text.encode() for text in data]
        raw = b"".join(len(item).to_bytes(4, "little") + item for item in encoded) if binary else b""
    if binary:
        tensor["parameters"] = {"binary_data_size": len(raw)}
    else:
        tensor["data"] = data
    return tensor, raw


def _datatype(dtype: np.dtype[Any]) -> str:
    """numpy's name as v2's: float32 -> FP32, int64 -> INT64, bool -> BOOL."""
    return "FP" + dtype.name[5:] if dtype.kind == "f" else dtype.name.upper()


# ---------------------------------------------------------------- the built-in models' samples

DIGIT = np.random.default_rng(0).integers(0, 17, size=(1, 8, 8)).astype(np.float32)
"""One 8x8 image for ``inferpool.engine.zoo.digits`` (pixel values 0..16)."""
SENTENCE = "InferPool serves a PyTorch model over HTTP on CPUs, fast and honest about it."
"""One sentence (~20 tokens: MiniLM's 32-token bucket) for ``config/minilm.toml``'s server."""


SENTENCES = [f"{SENTENCE} Variation number {i} of the sixteen." for i in range(16)]
"""Sixteen sentences in one request: the embedding workload of a batch client."""
IMAGE = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
"""One 224x224 RGB image for ``loadtest.resnet`` (ResNet-50)."""


def digits_json() -> Payload:
    return json_request(DIGIT.astype(int))


def digits_v2_json() -> Payload:
    return v2_request("digits", {"image": DIGIT[None]}, binary=False)


def digits_v2_binary() -> Payload:
    return v2_request("digits", {"image": DIGIT[None]}, ["label"])


def minilm_json() -> Payload:
    return json_request(SENTENCE)


def minilm_openai() -> Payload:
    """The sentence through OpenAI's embeddings API, floats back (as /predict sends them)."""
    return embeddings_request("minilm", SENTENCE)


def minilm_v2_binary() -> Payload:
    """The sentence as a v2 ``BYTES`` tensor, every output binary."""
    return v2_request("minilm", {"text": [SENTENCE]})


def minilm16_json() -> Payload:
    return json_request(SENTENCES)


def resnet50_v2_binary() -> Payload:
    return v2_request("resnet50", {"image": IMAGE})


PAYLOADS: dict[str, Callable[[], Payload]] = {
    "digits-json": digits_json,
    "digits-v2-json": digits_v2_json,
    "digits-v2-binary": digits_v2_binary,
    "minilm-json": minilm_json,
    "minilm-v2-binary": minilm_v2_binary,
    "minilm-openai": minilm_openai,
    "minilm16-json": minilm16_json,
    "resnet50-v2-binary": resnet50_v2_binary,
    "empty": lambda: Payload("/", method="GET"),
}
