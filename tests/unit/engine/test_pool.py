from __future__ import annotations

import threading
import time

import pytest

from inferpool.engine import Overloaded, RuntimePool


def test_borrow_gives_the_runtime_back_even_when_the_body_raises():
    pool = RuntimePool(["a", "b"])
    seen: list[int] = []

    def fail() -> None:
        with pool.borrow():
            seen.append(pool.idle)
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fail()
    assert seen == [1]
    assert pool.idle == 2


def test_lifo_reuses_the_most_recently_returned_runtime():
    pool = RuntimePool(["a", "b", "c"])
    with pool.borrow() as first:
        pass
    with pool.borrow() as second:
        assert second == first


def test_borrow_times_out_as_overloaded_when_every_runtime_is_busy():
    pool = RuntimePool(["only"], timeout=0.05)
    with pool.borrow():
        started = time.monotonic()
        with pytest.raises(Overloaded, match="all 1 runtimes stayed busy"), pool.borrow():
            pass
        assert time.monotonic() - started >= 0.05
    assert pool.idle == 1


def test_a_waiting_borrower_is_woken_when_a_runtime_comes_back():
    pool = RuntimePool(["only"], timeout=10)
    got: list[str] = []
    with pool.borrow():
        waiter = threading.Thread(target=lambda: got.append(pool.borrow().runtime))
        waiter.start()
        time.sleep(0.05)
        assert not got  # it is really waiting
    waiter.join(2)
    assert got == ["only"]


def test_an_empty_pool_is_refused():
    with pytest.raises(ValueError, match="at least one runtime"):
        RuntimePool([])


def test_replace_swaps_the_runtime_inside_a_held_lease_and_keeps_the_size():
    pool = RuntimePool(["a", "b"])
    lease = pool.borrow()
    with lease as runtime:
        old = pool.replace(lease, "fresh")
        assert old == runtime
        assert lease.runtime == "fresh"
    assert pool.size == 2
    assert pool.idle == 2
    assert sorted(pool.runtimes) == sorted({"a", "b"} - {old} | {"fresh"})
    with pool.borrow() as again:  # LIFO: the same lease, now holding the fresh runtime
        assert again == "fresh"


def test_replace_refuses_a_lease_that_is_idle_or_from_another_pool():
    pool, other = RuntimePool(["a"]), RuntimePool(["x"])
    idle = pool.borrow()
    idle.__exit__(None, None, None)
    with pytest.raises(ValueError, match="borrowed lease"):
        pool.replace(idle, "fresh")
    foreign = other.borrow()
    with pytest.raises(ValueError, match="another pool"):
        pool.replace(foreign, "fresh")
    assert pool.runtimes == ("a",)
    assert other.runtimes == ("x",)
