from __future__ import annotations

import threading
import time

import pytest

from engine import Overloaded, RuntimePool


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
