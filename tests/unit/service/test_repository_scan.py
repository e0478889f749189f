"""The model repository read from disk (no server): folders, numbered versions, version
policies, config.toml checks, the settings that enable it and the index the supervisor answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from inferpool.config import Settings
from inferpool.engine import ConfigError
from inferpool.service.models.host import plans, repository_plans, startup_plans
from inferpool.service.models.repository import scan
from inferpool.service.models.repository_calls import Refused, RepositoryCalls


def version(root: Path, model: str, number: int | str, config: str | None = None, archive: bool = True) -> Path:
    folder = root / model / str(number)
    folder.mkdir(parents=True)
    if archive:
        (folder / "model.pt2").write_bytes(b"not read by the scan")
    if config is not None:
        (folder / "config.toml").write_text(config)
    return folder


@pytest.mark.parametrize(
    ("policy", "selected"),
    [(None, [10]), ('version_policy = "all"', [1, 2, 10]), ("version_policy = {latest = 2}", [2, 10]),
     ("version_policy = {specific = [1, 10]}", [1, 10])],
)  # fmt: skip
def test_version_policies_select_as_triton_does(tmp_path, policy, selected):
    for number in (1, 2, 10):  # numbers, not names: 10 is the latest
        version(tmp_path, "m", number)
    (tmp_path / "m" / "notes").mkdir()  # not a number: not a version
    if policy is not None:
        (tmp_path / "m" / "config.toml").write_text(policy)
    assert scan(tmp_path)["m"].selected() == selected


def test_a_version_config_names_the_source_and_runtime(tmp_path):
    version(
        tmp_path, "m", 1, 'source = "tests.support.extra_models:affine"\n[runtime]\nbackend = "eager"\n', archive=False
    )
    [plan] = repository_plans(Settings(), scan(tmp_path))
    assert (plan.name, plan.version, plan.source, plan.options.backend) == (
        "m",
        "1",
        "tests.support.extra_models:affine",
        "eager",
    )


def test_a_hugging_face_folder_is_a_version_itself_or_named_in_its_config(tmp_path):
    (version(tmp_path, "encoder", 1, archive=False) / "config.json").write_text("{}")
    inner = version(tmp_path, "reranker", 1, 'source = "bge"\n', archive=False) / "bge"
    inner.mkdir()
    found = scan(tmp_path)
    assert found["encoder"].versions[1].source == str(tmp_path / "encoder" / "1")
    assert found["reranker"].versions[1].source == str(inner)


@pytest.mark.parametrize(
    ("config", "archive", "message"),
    [(None, False, "holds no model archives"), ("bogus = 1", True, "bogus: Extra inputs are not permitted"),
     ('[runtime]\nbackend = "nope"', True, "runtime.backend 'nope' is unknown"),
     ('source = "no_colon"', False, "must be 'package.module:function'")],
)  # fmt: skip
def test_a_version_that_cannot_be_served_says_why(tmp_path, config, archive, message):
    version(tmp_path, "m", 1, config, archive)
    assert message in (scan(tmp_path)["m"].versions[1].reason or "")
    with pytest.raises(ConfigError, match="model 'm' version 1"):
        repository_plans(Settings(), scan(tmp_path))


def test_a_bad_policy_is_named(tmp_path):
    version(tmp_path, "m", 1)
    (tmp_path / "m" / "config.toml").write_text("version_policy = {latest = 0}")
    with pytest.raises(ConfigError, match=r"model 'm' in the repository: .*config.toml: version_policy"):
        repository_plans(Settings(), scan(tmp_path))


def test_settings_need_a_repository_for_control(tmp_path):
    with pytest.raises(ValidationError, match="needs a repository: set model_repository"):
        Settings(model_control_mode="explicit")
    with pytest.raises(ValidationError, match="is not a directory"):
        Settings(model_repository=tmp_path / "missing")
    with pytest.raises(ValidationError, match="always need the API key"):
        Settings(auth_exempt=["/v2/repository/index"])
    settings = Settings(model_repository=tmp_path, model_control_mode="poll", repository_poll_seconds=2)
    assert startup_plans(settings) == startup_plans(Settings())  # an empty repository adds nothing


def test_the_repository_calls_index_and_plan_without_loading(tmp_path):
    for number in (1, 2):
        version(tmp_path, "m", number)
    version(tmp_path, "broken", 1, archive=False)
    settings = Settings(model_repository=tmp_path, model_control_mode="explicit")
    calls = RepositoryCalls(settings, plans(settings))  # served: the config's model only
    assert calls.index() == [
        {"name": "broken", "version": "1", "state": "UNAVAILABLE", "reason": calls.index()[0]["reason"]},
        {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
    ]
    wanted = calls.load("m", {"parameters": {"config": '{"runtime": {"backend": "eager"}}'}})
    assert [(p.name, p.version, p.options.backend) for p in wanted[1:]] == [("m", "2", "eager")]
    calls.served(wanted)
    assert [e["state"] for e in calls.index(ready_only=True)] == ["READY"]
    assert calls.unload("m") == wanted[:1]
    for call, message in [
        (lambda: calls.load("broken", {}), "holds no model archives"),
        (lambda: calls.load("../m", {}), "no such model folder"),
        (lambda: calls.load("m", {"parameters": {"config": "{"}}), "is not JSON"),
        (lambda: calls.unload("broken"), "not loaded from the repository"),
    ]:
        with pytest.raises(Refused, match=message):
            call()
