"""auto's choice is kept with the exports: a warm start serves it without timing the others."""

from __future__ import annotations

import pytest

from inferpool.engine.backends import autoselect
from inferpool.engine.backends.choice_cache import SUFFIX
from inferpool.engine.models.module import InferenceModule
from inferpool.engine.options import RuntimeOptions
from inferpool.engine.zoo.mlp import build as build_mlp


def _options(tmp_path, **changes) -> RuntimeOptions:
    return RuntimeOptions(backend="auto", auto_backends=("eager", "static"), compile_cache_dir=str(tmp_path), **changes)


def test_a_warm_start_serves_the_cached_winner_without_timing(tmp_path, monkeypatch):
    first = autoselect.resolve_backend(InferenceModule.from_spec(build_mlp()), _options(tmp_path))
    assert not first.cached
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1

    def no_timing(*args, **kwargs):
        raise AssertionError("a warm start must not time the candidates")

    monkeypatch.setattr(autoselect, "choose", no_timing)
    again = autoselect.resolve_backend(InferenceModule.from_spec(build_mlp()), _options(tmp_path))
    assert again.cached
    assert again.name == first.name
    assert again.trials == first.trials  # the table it was chosen from, as /v2/models/{name}/config shows
    assert again.report()["cached"] is True


@pytest.mark.parametrize("changes", [{"max_batch_size": 8}, {"auto_backends": ("eager",)}])
def test_what_changes_the_ranking_is_timed_afresh(tmp_path, changes):
    autoselect.resolve_backend(InferenceModule.from_spec(build_mlp()), _options(tmp_path))
    other = autoselect.resolve_backend(
        InferenceModule.from_spec(build_mlp()),
        _options(tmp_path) if not changes else RuntimeOptions(**{**_options(tmp_path).__dict__, **changes}),
    )
    assert not other.cached


def test_a_corrupt_cache_file_is_timed_again(tmp_path):
    autoselect.resolve_backend(InferenceModule.from_spec(build_mlp()), _options(tmp_path))
    (cached,) = tmp_path.glob(f"*{SUFFIX}")
    cached.write_text("{not json")
    again = autoselect.resolve_backend(InferenceModule.from_spec(build_mlp()), _options(tmp_path))
    assert not again.cached
