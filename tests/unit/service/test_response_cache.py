"""The response cache (service/response_cache.py) and the request digest it keys on
(service/request_digest.py): hits, misses, eviction by bytes, keys per model version and route,
and many threads at once."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import orjson

from inferpool.service.request_digest import request_digest
from inferpool.service.response_cache import MB, ResponseCache, size_of
from inferpool.service.v2.codec import parse_request


def key(owner: object, text: str, route: object = "predict") -> tuple[object, object, bytes]:
    """A key whose request part is one byte per character (its bytes count against the bound too)."""
    return owner, route, text.encode()


def test_a_miss_then_a_hit_with_the_same_object():
    cache = ResponseCache(1000)
    assert cache.get(key("m", "a")) is None
    body = b'{"outputs": [1, 2]}'
    assert cache.put(key("m", "a"), body)
    assert cache.get(key("m", "a")) is body
    assert cache.bytes == len(body) + 1  # the answer and its key
    assert cache.get(key("m", "b")) is None


def test_eviction_is_by_bytes_least_recently_used_first():
    cache = ResponseCache(100)
    for name in "abc":
        cache.put(key("m", name), bytes(30))
    assert cache.bytes == 93
    cache.get(key("m", "a"))  # a is now the most recently used: b goes first
    cache.put(key("m", "d"), bytes(30))
    assert cache.get(key("m", "b")) is None
    assert all(cache.get(key("m", name)) is not None for name in "acd")
    cache.put(key("m", "e"), bytes(95))  # one large answer pushes out all the others
    assert len(cache) == 1
    assert cache.bytes == 96
    assert not cache.put(key("m", "f"), bytes(100))  # with its key, larger than the whole cache: not held
    assert cache.get(key("m", "e")) is not None


def test_replacing_an_entry_counts_its_bytes_once():
    cache = ResponseCache(100)
    cache.put(key("m", "a"), bytes(40))
    cache.put(key("m", "a"), bytes(50))
    assert cache.bytes == 51
    assert len(cache) == 1


def test_no_answer_crosses_models_versions_or_routes():
    cache = ResponseCache(1000)
    version_1, version_2 = object(), object()  # two versions' records of one model name
    cache.put(key(version_1, "a"), b"one")
    assert cache.get(key(version_2, "a")) is None
    assert cache.get(key(version_1, "a", route="v2")) is None
    assert cache.get(key(version_1, "a")) == b"one"


def test_off_at_zero_megabytes():
    assert ResponseCache.of_megabytes(0) is None
    cache = ResponseCache.of_megabytes(1.5)
    assert cache is not None
    assert cache.max_bytes == int(1.5 * MB)


def test_sizes_of_what_routes_encode():
    assert size_of(b"abc") == 3
    assert size_of((b"abcd", 12)) == 12  # a v2 body and its JSON header's length
    assert size_of((b"abcd", None)) == 12
    assert size_of(object()) is None


def test_many_threads_keep_the_byte_count_and_the_bound():
    cache = ResponseCache(2000)
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(2000):
                k = key("m", str(int(rng.integers(0, 200))))
                if cache.get(k) is None:
                    cache.put(k, bytes(int(rng.integers(1, 120))))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert cache.bytes <= 2000
    assert cache.bytes == sum(size for _, size in cache._entries.values())
    assert all(cache.get(k) is not None for k in list(cache._entries))


def test_equal_requests_key_alike_and_different_ones_apart():
    a = request_digest([[1.0, 2.0], [3.0, 4.0]], None)
    assert a == request_digest([[1.0, 2.0], [3.0, 4.0]], None)
    assert a != request_digest([[1.0, 2.0], [3.0, 4.5]], None)
    assert a != request_digest([[1.0, 2.0], [3.0, 4.0]], "decoded differently")
    assert request_digest(1, None) != request_digest(1.0, None)  # an integer and a float are not one tensor


def test_arrays_key_by_type_shape_and_bytes():
    x = np.arange(6, dtype=np.float32)
    assert request_digest({"x": x}) == request_digest({"x": x.copy()})
    assert request_digest({"x": x}) != request_digest({"x": x.reshape(2, 3)})
    assert request_digest({"x": x}) != request_digest({"x": x.astype(np.float64)})
    text = np.array([b"a b", b"c"], dtype=object)
    assert request_digest(text) == request_digest(np.array([b"a b", b"c"], dtype=object))
    assert request_digest(text) != request_digest(np.array([b"a", b"b c"], dtype=object))


def test_a_string_cannot_pose_as_an_array():
    x = np.ones(2, dtype=np.float32)
    for guess in ("\0array", "array:", "array:" + "0" * 24):
        assert request_digest([x, guess]) != request_digest([guess, x])


def test_v2_requests_differ_by_id_and_requested_outputs():
    def parsed(extra: dict[str, object]) -> object:
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}], **extra}
        request = parse_request(bytearray(orjson.dumps(body)), None)
        return request_digest(request.inputs, request)

    assert parsed({}) == parsed({})
    assert parsed({"id": "1"}) != parsed({"id": "2"})
    assert parsed({"outputs": [{"name": "label"}]}) != parsed({})


@dataclass
class Opaque:
    handle: object


def test_what_cannot_be_written_is_not_cached():
    assert request_digest(Opaque(threading.Lock())) is None
    assert request_digest(Opaque(lambda: 1)) is None


def test_a_large_request_is_keyed_by_its_digest():
    image = np.random.default_rng(0).random((3, 64, 64), dtype=np.float32)
    found = request_digest({"x": image})
    assert found is not None
    assert len(found) == 32
    assert found == request_digest({"x": image.copy()})
    changed = image.copy()
    changed[2, 63, 63] += 1
    assert found != request_digest({"x": changed})
