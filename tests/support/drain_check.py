"""The outside check of a drain: clients loop on ``POST /predict`` while the server is told to
stop, and every request sent is counted. Lossless means each one got a 200, a clean 503 (JSON
error, ``Retry-After``, ``Connection: close``) or a refused connection (nothing was sent); a
reset or an empty answer after the request went out is a lost request. Used against the server
on the host (tests/e2e/service/test_processes.py) and in a container (tests/e2e/deploy)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx2
import numpy as np

SAMPLE = {"inputs": np.zeros((1, 8, 8)).tolist()}
CLEAN = {"200", "clean-503", "refused"}


def classify(call: Callable[[], httpx2.Response]) -> str:
    """'200', 'clean-503' (JSON error, Retry-After), 'refused' (nothing was sent) or what broke."""
    try:
        response = call()
    except httpx2.ConnectError:
        return "refused"
    except httpx2.HTTPError as exc:
        return f"broken: {exc!r}"
    if response.status_code == 503 and response.headers.get("retry-after") == "1":
        error = response.json()["error"]
        assert error.startswith(("model is not ready (stopping)", "overloaded")), error
        assert response.headers["connection"] == "close"
        return "clean-503"
    return str(response.status_code)


@dataclass
class Load:
    outcomes: list[tuple[float, str]] = field(default_factory=list)
    clients: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)  # set when the block fails

    def kinds(self) -> Counter[str]:
        return Counter(kind for _, kind in self.outcomes)

    def lost(self) -> Counter[str]:
        return Counter(kind for kind in self.kinds().elements() if kind not in CLEAN)

    def wait_answered(self, count: int, seconds: float = 60) -> None:
        """Until ``count`` requests got a 200: the load is really on (a loaded machine is slow)."""
        deadline = time.monotonic() + seconds
        while self.kinds()["200"] < count:
            assert time.monotonic() < deadline, f"fewer than {count} answers in {seconds} s: {self.kinds()}"
            time.sleep(0.05)

    def answered_after(self, at: float) -> bool:
        return any(kind == "200" and when > at for when, kind in self.outcomes)


@contextmanager
def looping_clients(url: str, clients: int = 16) -> Iterator[Load]:
    """``clients`` threads, half on one keep-alive connection each, half on a new connection per
    request, each looping until refused or broken; joined when the block ends."""
    load = Load()

    def loop(keep_alive: bool) -> None:
        with httpx2.Client(timeout=20) as http:
            while not load.stop.is_set():
                if keep_alive:
                    kind = classify(lambda: http.post(url + "/predict", json=SAMPLE))
                else:
                    kind = classify(lambda: httpx2.post(url + "/predict", json=SAMPLE, timeout=20))
                with load.lock:
                    load.outcomes.append((time.monotonic(), kind))
                if kind == "refused" or kind.startswith("broken"):
                    return

    load.clients = [threading.Thread(target=loop, args=(n % 2 == 0,), daemon=True) for n in range(clients)]
    for client in load.clients:
        client.start()
    try:
        yield load
    except BaseException:
        load.stop.set()  # the server may still be up: the clients would never meet a refusal
        raise
    finally:
        for client in load.clients:
            client.join(30)
