"""The HTTP connection is built on uvicorn's non-public classes and names, which any release may
change without notice; so uvicorn is pinned to the minor version tested (pyproject.toml), and
this test fails, naming the range, wherever another is installed.

What is read, and where (issue 56, item 2):

- service/http/protocol.py subclasses ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``
  and reads ``RequestResponseCycle`` (its ``scope``, ``disconnected``, ``response_complete``,
  ``transport``), and the protocol's ``cycle``, ``config.app``, ``connections``, ``pipeline``,
  ``flow.resume_reading``, ``loop``, ``transport``, and overrides its parser callbacks
  (``on_message_begin``, ``on_headers_complete``, ``on_body``, ``on_message_complete``), ``data_received``
  (replacing ``parser``),
  ``connection_made``/``connection_lost``, ``send_400_response`` and ``on_response_complete``
  (reading ``server_state.total_requests``, ``timeout_keep_alive``,
  ``timeout_keep_alive_handler`` and ``_start_asgi_task``).
- service/http/lane.py reads ``uvicorn.protocols.http.httptools_impl.STATUS_LINE``, and the protocol's ``parser``,
  ``url``, ``headers``, ``root_path``, ``connections``, ``tasks``, ``transport``,
  ``server_state.default_headers`` and ``on_response_complete``; its ``LaneRequest`` stands in
  for a ``RequestResponseCycle`` (``message_event``, ``more_body``,
  ``disconnected``, ``response_complete``, ``keep_alive``).
- service/processes/spread.py subclasses the protocol class again (``eof_received``,
  ``connection_lost``, ``on_headers_complete``) and reads ``cycle.keep_alive``.
- service/processes/drain.py overrides ``Server.startup`` and ``handle_exit`` and reads
  ``servers``, ``server_state.connections``, ``lifespan.state`` and
  ``config.http_protocol_class``.

httptools is read through its public parser API only (``get_method``, ``should_upgrade``,
``get_http_version``, ``should_keep_alive``, and a new ``HttpRequestParser(protocol)`` in the
protocol's ``parser`` after a body read past it): no pin of its own.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TESTED = (0, 55)
"""The uvicorn minor version the HTTP connection was tested with."""
PIN = f"uvicorn[standard]>={TESTED[0]}.{TESTED[1]},<{TESTED[0]}.{TESTED[1] + 1}"


def minor(text: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", text)
    assert found is not None, f"not a version: {text!r}"
    return int(found.group(1)), int(found.group(2))


def test_the_installed_uvicorn_is_the_tested_minor_version():
    installed = version("uvicorn")
    assert minor(installed) == TESTED, (
        f"uvicorn {installed} is installed, but InferPool's HTTP connection was tested only with "
        f"{PIN.removeprefix('uvicorn[standard]')} and reads uvicorn's non-public names (this test's docstring "
        "lists them): test the new version (tests/integration/service, tests/e2e/service), then move the pin "
        "in pyproject.toml and TESTED here together"
    )


def test_pyproject_pins_uvicorn_to_the_tested_minor_version():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    uvicorn = [spec for spec in dependencies if spec.startswith("uvicorn")]
    assert uvicorn == [PIN], f"pyproject.toml says {uvicorn}; the version tested here is {PIN}"
