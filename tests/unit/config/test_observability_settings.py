"""The observability settings' start-up checks: each refusal says what to do instead."""

from __future__ import annotations

import importlib.util

import pytest
from pydantic import ValidationError

from inferpool.config import load_settings
from inferpool.config.observability import OTLP_PROTOCOLS, TRACE_EXPORTERS
from inferpool.service.telemetry.tracing import EXPORTERS, exporter_key


def _refused(args: list[str]) -> str:
    with pytest.raises(ValidationError) as info:
        load_settings(None, args)
    return str(info.value)


def test_everything_is_off_by_default():
    settings = load_settings(None, [])
    assert (settings.tracing, settings.access_log, settings.payload_log) == (False, False, None)


def test_tracing_without_the_extra_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec

    def without_sdk(name: str, *args):
        return None if name.startswith("opentelemetry.sdk") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_sdk)
    assert "pip install 'inferpool[otel]'" in _refused(["--tracing"])


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER='zipkin' is not supported; use one of"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='udp' is not supported"),
    ],
)
def test_otel_variables_the_server_cannot_act_on_are_refused(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    assert message in _refused(["--tracing"])
    load_settings(None, [])  # only with tracing on


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace-sample", "1.5"], "trace_sample"),
        (["--access-log-sample", "-0.1"], "access_log_sample"),
        (["--payload-log-queue", "0"], "payload_log_queue"),
        (["--payload-log", "/no/such/folder/p.jsonl"], "does not exist; give a file in an existing folder"),
    ],
)
def test_bad_values_are_refused(args, message):
    assert message in _refused(args)


def test_every_exporter_the_settings_accept_has_an_implementation():
    accepted = {name for name in TRACE_EXPORTERS if name != "otlp"} | {f"otlp/{p}" for p in OTLP_PROTOCOLS}
    assert accepted == set(EXPORTERS)
    assert exporter_key({}) == "otlp/http/protobuf"  # the spec's default
    assert exporter_key({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "otlp/grpc"
    traces_wins = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert exporter_key(traces_wins) == "otlp/http/protobuf"
    assert exporter_key({"OTEL_TRACES_EXPORTER": "none"}) == "none"
