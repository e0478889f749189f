"""The response cache (service/response_cache.py) and the request digest it keys on
(service/request_digest.py): hits, misses, eviction by bytes, keys per model version and route,
and many threads at once."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest

from inferpool.service import request_digest as digests
from inferpool.service.cache_look import CacheLook
from inferpool.service.cache_sampling import EVERY, QUIET, LookSampler
from inferpool.service.request_digest import request_digest, written_inputs
from inferpool.service.response_cache import MB, Doorkeeper, ResponseCache, size_of
from inferpool.service.v2.codec import parse_request


def key(text: str, owner: int = 0) -> bytes:
    """A key as the front door makes them: four bytes for the model and route, then the request
    (one byte per character here; a key's bytes count against the bound too)."""
    return owner.to_bytes(4, "little") + text.encode()


def test_a_miss_then_a_hit_with_the_same_object():
    cache = ResponseCache(1000)
    assert cache.get(key("a")) is None
    body = b'{"outputs": [1, 2]}'
    assert cache.put(key("a"), body)
    assert cache.get(key("a")) is body
    assert cache.bytes == len(body) + 5  # the answer and its key
    assert cache.get(key("b")) is None


def test_eviction_is_by_bytes_least_recently_used_first():
    cache = ResponseCache(110)
    for name in "abc":
        cache.put(key(name), bytes(30))
    assert cache.bytes == 105
    cache.get(key("a"))  # a is now the most recently used: b goes first
    cache.put(key("d"), bytes(30))
    assert cache.get(key("b")) is None
    assert all(cache.get(key(name)) is not None for name in "acd")
    cache.put(key("e"), bytes(95))  # one large answer pushes out all the others
    assert len(cache) == 1
    assert cache.bytes == 100
    assert not cache.put(key("f"), bytes(110))  # with its key, larger than the whole cache: not held
    assert cache.get(key("e")) is not None


def test_replacing_an_entry_counts_its_bytes_once():
    cache = ResponseCache(100)
    cache.put(key("a"), bytes(40))
    cache.put(key("a"), bytes(50))
    assert cache.bytes == 55
    assert len(cache) == 1


def test_no_answer_crosses_models_versions_or_routes():
    """The front door's look gives each (model version's record, route's encoder) its own four bytes."""
    look = CacheLook(ResponseCache(1000))
    version_1: Any = object()  # two versions' records of one model name
    version_2: Any = object()
    predict: Any = lambda *_: b"{}"  # noqa: E731 -- two routes' encoders
    v2: Any = lambda *_: b"[]"  # noqa: E731

    prefixes = [look.key_prefix(served, route) for served in (version_1, version_2) for route in (predict, v2)]
    assert len(set(prefixes)) == 4
    assert all(len(prefix) == 4 for prefix in prefixes)
    assert look.key_prefix(version_1, v2) == prefixes[1]  # and the same one every time
    cache = ResponseCache(1000)
    cache.put(prefixes[0] + b"a", b"one")
    assert all(cache.get(prefix + b"a") is None for prefix in prefixes[1:])
    assert cache.get(prefixes[0] + b"a") == b"one"


def test_the_doorkeeper_keeps_a_request_from_its_second_sighting():
    doorkeeper = Doorkeeper()
    assert doorkeeper.first_sighting(12345)
    assert not doorkeeper.first_sighting(12345)  # seen: kept
    assert not doorkeeper.first_sighting(12345)
    assert doorkeeper.first_sighting(-7)  # any hash, negative too
    assert not doorkeeper.first_sighting(-7)


def test_the_doorkeeper_remembers_a_window_of_sightings_and_renews_repeats():
    doorkeeper = Doorkeeper()
    old, renewed = Doorkeeper.BITS * 3 + 1, Doorkeeper.BITS * 5 + 2  # slots no other mark below takes
    doorkeeper.first_sighting(old)
    doorkeeper.first_sighting(renewed)
    for sighting in range(10, 10 + Doorkeeper.WINDOW):  # one generation of others: still remembered
        doorkeeper.first_sighting(sighting * 7)
    assert not doorkeeper.first_sighting(renewed)  # seen again: its mark is renewed
    for sighting in range(10, 10 + Doorkeeper.WINDOW):
        doorkeeper.first_sighting(Doorkeeper.BITS // 2 + sighting * 7)
    assert doorkeeper.first_sighting(old)  # two generations on: forgotten
    assert not doorkeeper.first_sighting(renewed)


def test_one_off_requests_leave_few_shared_marks():
    doorkeeper = Doorkeeper()
    rng = np.random.default_rng(0)
    kept = sum(not doorkeeper.first_sighting(hash(bytes(rng.bytes(16)))) for _ in range(3 * Doorkeeper.WINDOW))
    assert kept < 0.06 * 3 * Doorkeeper.WINDOW


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
                k = key(str(int(rng.integers(0, 200))))
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


def test_the_inputs_forms_cannot_pose_as_each_other():
    x = np.arange(4, dtype=np.float32)
    forms = [
        written_inputs(x), written_inputs({"x": x}), written_inputs([x]), written_inputs({"x": x, "y": [1]}),
        written_inputs(("<f4", (4,), x.tobytes())), written_inputs({"x": ("<f4", (4,), x.tobytes())}),
        written_inputs([0, "<f4", (4,), x.tobytes()]), written_inputs([1, "x", "<f4", (4,), x.tobytes()]),
    ]  # fmt: skip
    assert None not in forms
    assert len(set(forms)) == len(forms)
    assert written_inputs({"x": x}) == written_inputs({"x": x.copy()})
    assert written_inputs({"x": x, "y": x}) != written_inputs({"y": x, "x": x})  # each array by its name
    # A view in another memory order is written in C order, as its copy.
    assert written_inputs(x.reshape(2, 2).T) == written_inputs(np.ascontiguousarray(x.reshape(2, 2).T))


def test_a_dataclass_is_keyed_by_its_class_and_fields_and_a_reference_to_the_inputs_as_one():
    @dataclass
    class Asked:
        inputs: object
        id: str | None = None

    x = {"x": np.arange(4, dtype=np.float32)}
    y = {"x": np.arange(4, dtype=np.float32) + 1}
    copy = {"x": x["x"].copy()}
    assert request_digest(x, Asked(x)) == request_digest(copy, Asked(copy))
    assert request_digest(x, Asked(x)) != request_digest(y, Asked(y))
    assert request_digest(x, Asked(x)) != request_digest(x, Asked(x, "1"))
    assert request_digest(x, Asked(x)) != request_digest(x, Asked(y))  # the inputs again, or others
    looks_alike = (0, Asked.__module__, Asked.__qualname__, {"inputs": x, "id": None})
    assert request_digest(x, Asked(x)) != request_digest(x, looks_alike)
    assert request_digest(x, Asked(x)) != request_digest(x, Opaque(x))  # another class, same fields
    assert request_digest(x, Asked(x), written_inputs(x)) == request_digest(x, Asked(x))


def test_the_look_sampler_looks_at_one_in_every_few_after_quiet_misses_until_a_hit():
    sampler = LookSampler()
    for _ in range(QUIET):
        assert not sampler.skips()
        sampler.missed()
    assert sampler.sampling
    looked = [not sampler.skips() for _ in range(10 * EVERY)]
    assert sum(looked) == 10
    sampler.hit()
    assert not sampler.sampling
    assert not any(sampler.skips() for _ in range(EVERY))


def test_the_sampler_skips_the_same_share_whatever_the_looks_found():
    """A look that found nothing to count (inputs it cannot write, say) still moves the turn on."""
    sampler = LookSampler()
    for _ in range(QUIET):
        sampler.missed()
    assert [sampler.skips() for _ in range(2 * EVERY)] == ([False] + [True] * (EVERY - 1)) * 2


@dataclass(eq=False)
class _Served:
    """What ``CacheLook.look`` reads of a front door's record (service/frontdoor.py: Served)."""

    model: Any
    sampler: LookSampler


class _Tally:
    def __init__(self) -> None:
        self.count = 0

    def add(self) -> None:
        self.count += 1


@pytest.mark.parametrize(("floor_ms", "kept_at"), [(1, "second"), (5, "first")])
def test_a_dear_model_is_looked_at_every_time_and_a_cheap_one_sampled(floor_ms, kept_at):
    """A model whose call is 2 ms or more never samples (a miss there is a whole call); one
    cheaper keeps a request from its second sighting and samples once nothing hits."""
    look = CacheLook(ResponseCache(MB))
    served: Any = _Served(type("Model", (), {"deadline_floor_ms": floor_ms})(), LookSampler())
    tallies: Any = type("Tallies", (), {"hit": _Tally(), "miss": _Tally()})()
    same = {"x": np.ones(3, dtype=np.float32)}
    key, found = look.look(served, tallies, same, repr, None)
    assert found is None
    assert (key is None) == (kept_at == "second")
    if key is not None:
        look.keep(key, b"answer")
    else:
        key, _ = look.look(served, tallies, same, repr, None)  # the second sighting builds the key
        assert key is not None
        look.keep(key, b"answer")
    assert look.look(served, tallies, {"x": np.ones(3, dtype=np.float32)}, repr, None) == (key, b"answer")
    assert tallies.hit.count == 1
    for value in range(QUIET + 1):
        look.look(served, tallies, {"x": np.full(3, value + 2.0, dtype=np.float32)}, repr, None)
    assert served.sampler.sampling == (kept_at == "second")


def test_equal_inputs_are_sighted_alike_in_every_form():
    """The doorkeeper's hash: JSON's lists (written by orjson), arrays and dicts of them, and what
    orjson cannot write (pickled instead)."""
    forms = [
        [[1, 2.5], [3, 4]], [["a b", "c"]], np.arange(4, dtype=np.float32), {"x": np.ones(2)},
        [np.ones(2)], [2**70], ("a", 1),
    ]  # fmt: skip
    for form in forms:
        assert digests.sighting(form) is not None
        assert digests.sighting(form) == digests.sighting(copy.deepcopy(form))
    assert digests.sighting([[1, 2.5], [3, 4]]) != digests.sighting([[1, 2.5], [3, 5]])
    assert digests.sighting(Opaque(lambda: 1)) is None
