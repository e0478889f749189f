"""The soak's request mix (loadtest.soak): what each kind of request sends, how often, and the
status and answer it must get back.

About 55 % valid requests (single samples and batches to ``/predict``, the v2 route in JSON and
binary), 30 % invalid (bad JSON, wrong shape, strings, bodies over the limit, unknown models),
8 % with a deadline too short to meet (503 or 504), 7 % GETs of ``/metrics`` and
``/health/ready``. ``check`` classifies an answer: None when it is the one its kind expects.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import numpy as np

from inferpool.harness.payloads import Payload, json_request, v2_request

MAX_BODY_BYTES = 65_536
IMAGES = np.random.default_rng(0).integers(0, 17, size=(16, 1, 8, 8)).astype(np.float32)


@dataclass
class Call:
    """One request to make and what its answer must be."""

    method: str
    path: str
    expect: frozenset[int]
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    images: list[int] = field(default_factory=list)
    """For a 200: indices into IMAGES whose labels the answer must give, in order."""
    single: bool = False
    """A single sample (the label is a scalar) rather than a batch."""
    chunked: bool = False
    """Send the body in 8 KiB chunks without a Content-Length (the server must count)."""
    answer: str = ""
    """How to read a 200: predict, v2json, v2binary, metrics, ready."""

    @classmethod
    def of(cls, payload: Payload, expect: frozenset[int], **kw: Any) -> Call:
        return cls(payload.method, payload.path, expect, payload.body, dict(payload.headers), **kw)


OK = frozenset({200})
DEADLINE = frozenset({503, 504})
TOO_SHORT = frozenset({400})  # a deadline under 1 ms: invalid, refused before admission


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _v2_call(indices: list[int], binary: bool, expect: frozenset[int] = OK, **parameters: object) -> Call:
    payload = v2_request("digits", {"image": IMAGES[indices]}, ["label"], binary=binary, **parameters)
    return Call.of(payload, expect, images=indices, answer="v2binary" if binary else "v2json")


def _predict(inputs: object, expect: frozenset[int] = OK, timeout_ms: str | None = None, **kw: Any) -> Call:
    call = Call.of(json_request(inputs), expect, **kw)
    if timeout_ms is not None:
        call.headers["X-Request-Timeout-Ms"] = timeout_ms
    return call


def _bad(path: str, content: bytes, expect: int = 400, **headers: str) -> Call:
    return Call("POST", path, frozenset({expect}), content, {"content-type": "application/json", **headers})


def _indices(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(len(IMAGES)) for _ in range(n)]


def _single(rng: random.Random) -> Call:
    i = rng.randrange(len(IMAGES))
    return _predict(IMAGES[i].tolist(), images=[i], single=True, answer="predict")


def _batch(rng: random.Random) -> Call:
    indices = _indices(rng, rng.randint(2, 8))
    return _predict(IMAGES[indices].tolist(), images=indices, answer="predict")


def _tiny_timeout(rng: random.Random) -> Call:
    # 1 to 5 µs (as a client might write them): shorter than any model call, so refused as
    # invalid (400) before admission, not answered 504 after it (service/timing.py).
    ms = rng.choice(["0.001", "0.002", "0.005"])
    i = rng.randrange(len(IMAGES))
    return _predict(IMAGES[i].tolist(), TOO_SHORT, ms)


def _oversized(rng: random.Random) -> Call:
    # A syntactically valid body just over the limit: 413 on its Content-Length, or, sent
    # chunked, once the server has counted past the limit.
    filler = "0," * ((MAX_BODY_BYTES - 10) // 2 + rng.randint(64, 4096))
    call = _bad(rng.choice(["/predict", "/v2/models/digits/infer"]), f'{{"inputs":[{filler}0]}}'.encode(), 413)
    call.chunked = rng.random() < 0.5
    return call


def _unknown_model(rng: random.Random) -> Call:
    # Varying names: a metric labelled by the raw path would grow without bound here.
    name = f"nope-{rng.randrange(1_000_000)}"
    body = _json({"inputs": IMAGES[0].tolist()})
    return _bad(rng.choice([f"/predict/{name}", f"/v2/models/{name}/infer"]), body, 404)


# (kind, weight, factory): about 55 % valid, 30 % invalid, 8 % past their deadline, 7 % GETs.
MIX: list[tuple[str, int, Callable[[random.Random], Call]]] = [
    ("predict_single", 20, _single),
    ("predict_batch", 12, _batch),
    ("v2_json", 10, lambda rng: _v2_call(_indices(rng, rng.randint(1, 4)), binary=False)),
    ("v2_binary", 13, lambda rng: _v2_call(_indices(rng, rng.randint(1, 8)), binary=True)),
    ("bad_json", 6, lambda rng: _bad(rng.choice(["/predict", "/v2/models/digits/infer"]), b'{"inputs": [[1, 2')),
    ("wrong_shape", 6, lambda rng: _bad("/predict", _json({"inputs": [[1.0, 2.0]] * rng.randint(1, 3)}))),
    ("strings", 6, lambda rng: _bad("/predict", _json({"inputs": [[["x"] * 8] * 8]}))),
    ("oversized", 6, _oversized),
    ("unknown_model", 6, _unknown_model),
    ("tiny_timeout", 5, _tiny_timeout),
    ("v2_tiny_timeout", 3, lambda rng: _v2_call(_indices(rng, 1), rng.random() < 0.5, TOO_SHORT, timeout=5)),
    ("metrics", 3, lambda rng: Call("GET", "/metrics", OK, answer="metrics")),
    ("ready", 4, lambda rng: Call("GET", "/health/ready", OK, answer="ready")),
]
KINDS = [kind for kind, _, _ in MIX]
WEIGHTS = [weight for _, weight, _ in MIX]
FACTORIES = {kind: factory for kind, _, factory in MIX}


def _labels_of(call: Call, response: httpx2.Response) -> list[int]:
    if call.answer == "predict":
        label = response.json()["outputs"]["label"]
        return [label] if call.single else list(label)
    if call.answer == "v2json":
        outputs = response.json()["outputs"]
    else:
        length = int(response.headers["inference-header-content-length"])
        raw = response.content
        outputs = json.loads(raw[:length])["outputs"]
        offset = length
        for output in outputs:
            size = output["parameters"]["binary_data_size"]
            output["data"] = np.frombuffer(raw[offset : offset + size], dtype=np.int64).tolist()
            offset += size
        if offset != len(raw):
            raise ValueError(f"binary outputs end at {offset}, body has {len(raw)} bytes")
    (label,) = [o for o in outputs if o["name"] == "label"]
    return list(label["data"])


def check(call: Call, response: httpx2.Response, labels: dict[int, int]) -> str | None:
    """What is wrong with this answer, or None."""
    status = response.status_code
    if status not in call.expect:
        return f"status {status}, expected {sorted(call.expect)}"
    if status != 200:
        try:
            body = response.json()
        except ValueError:
            return f"{status} without a JSON body"
        if not isinstance(body, dict) or not isinstance(body.get("error"), str) or not body["error"]:
            return f"{status} without an error message"
        if status == 503 and not response.headers.get("retry-after", "").isdigit():
            return "503 without a numeric Retry-After"
        return None
    try:
        if call.answer == "metrics":
            return None if "inferpool_requests_total" in response.text else "metrics without inferpool_requests_total"
        if call.answer == "ready":
            return None if response.json().get("status") == "ready" else f"ready answered {response.text[:200]}"
        got = _labels_of(call, response)
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable 200 answer: {exc!r}"
    want = [labels[i] for i in call.images]
    return None if got == want else f"labels {got}, expected {want} (answers crossed?)"
