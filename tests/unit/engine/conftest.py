from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Backends that cache (onnxruntime, aoti) write under $XDG_CACHE_HOME unless told otherwise:
    the engine tests get their own, so that they neither fill nor read the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield
