"""Fuzz every route from the service's own OpenAPI spec with schemathesis, all checks on,
against the real server.

Driven through hypothesis directly: schemathesis' pytest plugin does not run on pytest 9.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

from loadtest.server import run_server, wait_ready

MAX_EXAMPLES = 50  # per operation; bounded so the whole fuzz run stays under a minute or so


def fuzzer(operation: schemathesis.APIOperation, tried: dict[str, int]):
    @given(case=operation.as_strategy())
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case) -> None:
        tried[operation.label] += 1
        case.call_and_validate()

    return fuzz


def test_every_route_answers_within_its_spec(tmp_path, capsys):
    tried: dict[str, int] = {}
    failures: dict[str, str] = {}
    with run_server(tmp_path, "--max-body-bytes", "65536") as server:
        wait_ready(server)
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        for result in schema.get_all_operations():
            operation = result.ok()  # type: ignore[union-attr]  # an Err would raise here, failing the test
            label = operation.label
            tried[label] = 0

            try:
                fuzzer(operation, tried)()
            except BaseException as exc:  # noqa: BLE001 -- schemathesis raises exception groups; report all
                failures[label] = f"{type(exc).__name__}: {exc}"[:2000]
        assert server.process.poll() is None, "the server must survive the fuzzing"
    with capsys.disabled():
        print(f"\nschemathesis: {sum(tried.values())} examples over {len(tried)} operations, {len(failures)} failing")
    assert len(tried) >= 10
    assert not failures, "\n\n".join(f"{op}:\n{error}" for op, error in failures.items())
