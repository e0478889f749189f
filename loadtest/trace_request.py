"""The route one request takes through InferPool's own code, as it runs (not as it reads).

    python -m loadtest.trace_request [--path /predict] [--calls] [--opcodes]

Serves the default model in-process (no flags), sends a few warm-up requests, then records
one ``POST`` with ``sys.setprofile`` on every thread: each call into a function of the
``inferpool`` package is a hop. Prints the hops, the modules entered, and the revisits (a module
entered again after the request left it for another module), with the module sequence, so that
a change to the hot path can be held against the one before it. ``--opcodes``: the bytecodes
the request executed in each module too (``sys.settrace`` per opcode, a second request).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections import Counter
from types import FrameType
from typing import Any

import orjson
from fastapi.testclient import TestClient

from inferpool.config import load_settings
from inferpool.service.app import create_app

BODIES = {
    "/predict": orjson.dumps({"inputs": [[[0.0] * 8] * 8]}),
    "/v2/models/digits/infer": orjson.dumps(
        {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]}
    ),
}


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) and name.startswith("inferpool.") else None


def trace(client: TestClient, path: str) -> list[str]:
    """The module of every inferpool function called while answering one request."""
    calls: list[str] = []
    seen: list[FrameType] = []  # held, so that ids stay unique for the request
    entered: set[int] = set()
    lock = threading.Lock()

    def profile(frame: FrameType, event: str, _: Any) -> None:
        # A coroutine resumed is the same frame called again: one hop, not one per await.
        # Comprehensions are frames too in 3.11, not calls anyone wrote.
        if event == "call" and id(frame) not in entered and not frame.f_code.co_name.startswith("<"):
            module = _module(frame)
            if module is not None and module != __name__:
                with lock:
                    entered.add(id(frame))
                    seen.append(frame)
                    calls.append(f"{module}:{frame.f_code.co_qualname}")

    answer_hooked(client, path, profile, trace=False)
    return calls


def answer_hooked(client: TestClient, path: str, hook: Any, *, trace: bool) -> None:
    """One request with ``hook`` as the profile (or, ``trace``, the trace) function. The app
    runs on the test client's portal thread: the hook is set there (and for any worker thread
    started meanwhile), around the request."""
    portal = client.portal
    assert portal is not None, "enter the client (with TestClient(...)) first"
    on_threads, here = (threading.settrace, sys.settrace) if trace else (threading.setprofile, sys.setprofile)
    on_threads(hook)
    portal.call(here, hook)
    try:
        response = client.post(path, content=BODIES[path], headers={"content-type": "application/json"})
    finally:
        portal.call(here, None)
        on_threads(None)
    response.raise_for_status()


def count_opcodes(client: TestClient, path: str) -> Counter[str]:
    """Bytecodes executed in each inferpool function while answering one request: a count that,
    unlike CPU time, does not move with the machine's load (C code, numpy's and the model's,
    is one opcode a call)."""
    counts: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, _: Any) -> Any:
        module = _module(frame)
        if module is None or module == __name__:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        where = f"{module}:{frame.f_code.co_qualname}"

        def local(frame: FrameType, event: str, _: Any) -> Any:
            if event == "opcode":
                counts[where] += 1
            return local

        return local

    answer_hooked(client, path, tracer, trace=True)
    return counts


def summary(calls: list[str]) -> dict[str, Any]:
    modules = [call.split(":")[0] for call in calls]
    route: list[str] = []
    for module in modules:
        if not route or route[-1] != module:
            route.append(module)
    revisits = len(route) - len(set(route))
    return {"hops": len(calls), "modules": len(set(modules)), "revisits": revisits, "route": route}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/predict", choices=sorted(BODIES))
    parser.add_argument("--calls", action="store_true", help="print every call, not only the module route")
    parser.add_argument("--opcodes", action="store_true", help="also the bytecodes executed, per module")
    args = parser.parse_args()
    app = create_app(load_settings(None, []))
    with TestClient(app) as client:
        app.state.host.wait_loaded(120)
        for _ in range(20):
            client.post(args.path, content=BODIES[args.path]).raise_for_status()
        calls = trace(client, args.path)
        opcodes = count_opcodes(client, args.path) if args.opcodes else None
    found = summary(calls)
    print(f"{args.path}: {found['hops']} calls, {found['modules']} modules, {found['revisits']} revisits")
    print(" -> ".join(m.removeprefix("inferpool.") for m in found["route"]))
    if args.calls:
        print("\n".join(calls))
    if opcodes is not None:
        areas: Counter[str] = Counter()
        for where, count in opcodes.items():
            areas[where.split(".")[1]] += count
        print("opcodes: " + ", ".join(f"{area} {count}" for area, count in sorted(areas.items())))
        print("\n".join(f"{count:6d} {where.removeprefix('inferpool.')}" for where, count in opcodes.most_common()))


if __name__ == "__main__":
    main()
