from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from config import load_settings
from service.app import create_app


@contextmanager
def app_client(*cli_args: str) -> Iterator[TestClient]:
    """The app in-process, configured as by these CLI flags, with its model loaded."""
    app = create_app(load_settings(None, list(cli_args)))
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.host.wait_loaded(60)
        yield client


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``, in Prometheus text."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


@pytest.fixture(scope="module")
def client():
    with app_client("--max-body-bytes", "65536", "--runtime.num-runtimes", "2") as test_client:
        yield test_client
