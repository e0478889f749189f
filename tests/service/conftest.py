from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from config import load_settings
from service.app import create_app


@pytest.fixture(scope="module")
def client():
    app = create_app(load_settings(None, ["--max-body-bytes", "65536", "--runtime.num-runtimes", "2"]))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        app.state.host.wait_loaded(60)
        yield test_client
