from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from inferpool.config import load_settings
from inferpool.harness.metrics import metric_total as metric_total  # re-exported: the service tests use it
from inferpool.service.app import create_app


@contextmanager
def app_client(*cli_args: str) -> Iterator[TestClient]:
    """The app in-process, configured as by these CLI flags, with its model loaded."""
    app = create_app(load_settings(None, list(cli_args)))
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.host.wait_loaded(60)
        yield client


@pytest.fixture(scope="module")
def client():
    with app_client("--max-body-bytes", "65536", "--runtime.num-runtimes", "2") as test_client:
        yield test_client
