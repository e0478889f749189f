from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from inferpool.config import DEFAULT_CONFIG_FILE, load_settings
from inferpool.engine import BACKENDS


def test_default_file_and_class_defaults_agree(monkeypatch, tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_settings(empty) == load_settings()
    file_values = tomllib.loads(DEFAULT_CONFIG_FILE.read_text())
    # With no flags the server measures: the backend (fastest of the quick candidates) and the
    # dispatch (GIL share of that backend's call vs a hand-off).
    assert (file_values["runtime"]["backend"], file_values["runtime"]["dispatch"]) == ("auto", "auto")
    assert (load_settings().runtime.backend, load_settings().runtime.dispatch) == ("auto", "auto")


def test_priority_is_cli_then_env_then_file(monkeypatch, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("port = 7000\nmax_queue = 3\n[runtime]\nwarmup_iters = 9\n")
    monkeypatch.setenv("INFERPOOL_PORT", "7001")
    monkeypatch.setenv("INFERPOOL_RUNTIME__INTRA_OP_THREADS", "2")
    settings = load_settings(config, ["--port", "7002"])
    assert settings.port == 7002
    assert settings.max_queue == 3
    assert settings.runtime.warmup_iters == 9  # nested file value survives a nested env override
    assert settings.runtime.intra_op_threads == 2
    assert load_settings(config).port == 7001


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runtime.backend", "tensorrt"], f"runtime.backend 'tensorrt' is unknown; choose one of {sorted(BACKENDS)}"),
        (["--runtime.intra-op-threads", "0"], "intra_op_threads=0 is invalid: use 1 or more"),
        (["--model", "mymodel"], "must be 'package.module:function', a path ending in .pt2"),
        (["--model", "missing.pt2"], "does not exist"),
        (["--port", "70000"], "less than or equal to 65535"),
        (["--latency-buckets", "[0.1, 0.01]"], "must be positive and strictly increasing"),
        (["--runtime.dispatch", "fastest"], "dispatch='fastest' is invalid: use one of ('threads', 'inline', 'auto')"),
        (["--port", "9000", "--grpc-port", "9000"], "give gRPC its own port (or 0 to turn it off)"),
        (["--grpc-server", "tonic"], "grpc_server 'tonic' is unknown; choose one of ['auto', 'native', 'grpcio']"),
    ],
)
def test_bad_values_are_refused_with_a_fix(args, message):
    with pytest.raises(ValidationError, match="1 validation error") as info:
        load_settings(None, args)
    assert message in str(info.value)


def test_unknown_keys_in_the_file_are_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(ValidationError, match="prot"):
        load_settings(config)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.toml does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_a_removed_runtime_option_says_what_replaced_it(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[runtime]\ninline_below_us = 50.0\n")
    with pytest.raises(ValidationError, match="inline_below_us was removed: dispatch='auto' no longer compares"):
        load_settings(config)


def test_unknown_runtime_options_are_refused_not_ignored(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[runtime]\nbackend = 'eager'\nintra_op_thread = 2\n")  # a typo once silently ignored
    with pytest.raises(ValidationError, match=r"runtime\.intra_op_thread\n.*Unexpected keyword argument"):
        load_settings(config)
