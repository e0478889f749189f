"""The front door's pieces without a server: traceparent parsing for the access log, payload
decoding and redaction, the bounded payload queue, and the JSON access line."""

from __future__ import annotations

import gzip
import json
import logging

import orjson
from prometheus_client import CollectorRegistry

from inferpool.config import load_settings
from inferpool.service.grpc import inference_pb2 as pb
from inferpool.service.telemetry.logs import FORMATTERS, JsonFormatter, RequestIdFilter
from inferpool.service.telemetry.observe import Observer, _Line
from inferpool.service.telemetry.payloads import REDACTED, PayloadLog, grpc_payload, http_payload, redact, render
from inferpool.service.telemetry.tracing import caller_trace_id

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_no_observer_when_everything_is_off():
    assert Observer.for_settings(load_settings(None, []), CollectorRegistry()) is None
    assert Observer.for_settings(load_settings(None, ["--access-log"]), CollectorRegistry()) is not None


def test_caller_trace_id_from_http_headers_and_grpc_metadata():
    assert caller_trace_id([(b"traceparent", f"00-{TRACE}-00f067aa0ba902b7-01".encode())]) == TRACE
    assert caller_trace_id([("traceparent", f"00-{TRACE}-00f067aa0ba902b7-00")]) == TRACE
    for bad in ("", "00-xyz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{'g' * 32}-01-01"):
        assert caller_trace_id([(b"traceparent", bad.encode())]) is None
    assert caller_trace_id([(b"x-request-id", b"1")]) is None


def test_redaction_of_named_tensors_in_both_protocols():
    predict = {"inputs": {"text": "secret", "mask": [1]}, "outputs": {"label": 3}}
    assert redact(predict, frozenset({"text", "label"})) == {
        "inputs": {"text": REDACTED, "mask": [1]},
        "outputs": {"label": REDACTED},
    }
    v2 = {"inputs": [{"name": "text", "data": ["secret"]}, {"name": "mask", "data": [1]}]}
    assert redact(v2, frozenset({"text"}))["inputs"] == [
        {"name": "text", "data": REDACTED},
        {"name": "mask", "data": [1]},
    ]
    assert redact([1, 2], frozenset({"text"})) == [1, 2]  # a single unnamed input has no name to match


def test_http_payloads_decode_gzip_and_size_binary_parts():
    document = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]}
    head = orjson.dumps(document)
    assert http_payload(head + b"\0" * 8, len(head), None, frozenset()) == {**document, "binary_bytes": 8}
    assert http_payload(gzip.compress(head), None, "gzip", frozenset()) == document
    assert http_payload(b"{oops", None, None, frozenset()) == {"undecoded_bytes": 5}


def test_grpc_payloads_keep_binary_data_by_size_only():
    request = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"\0" * 12])
    request.inputs.add(name="x", datatype="FP32", shape=[3])
    found = grpc_payload(request, frozenset())
    assert found["modelName"] == "m"
    assert found["rawInputContents"] == [{"binary_bytes": 12}]
    named = pb.ModelInferRequest(model_name="m")
    named.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(2.5)
    assert grpc_payload(named, frozenset({"x"}))["inputs"][0]["contents"] == REDACTED


def test_render_keeps_the_metadata_and_decodes_both_sides():
    record = {"time": 0.0, "request_id": "r", "trace_id": None, "route": "/predict", "request": b'{"inputs": [1]}',
              "request_json_length": None, "request_encoding": None, "response": b'{"outputs": {"y": 2}}',
              "response_json_length": None}  # fmt: skip
    out = render(record, frozenset())
    assert out == {"time": "1970-01-01T00:00:00.000+00:00", "request_id": "r", "trace_id": None, "route": "/predict",
                   "request": {"inputs": [1]}, "response": {"outputs": {"y": 2}}}  # fmt: skip


def test_a_full_queue_drops_and_counts_without_waiting(tmp_path):
    registry = CollectorRegistry()
    log = PayloadLog(str(tmp_path / "p.jsonl"), 2, frozenset(), registry)  # not started: nothing drains it
    for n in range(5):
        log.offer({"time": 0.0, "request_id": str(n)})
    assert registry.get_sample_value("inferpool_payload_log_records_total", {"outcome": "dropped"}) == 3
    log.start()
    log.stop()  # the two queued are written, then the thread ends
    lines = (tmp_path / "p.jsonl").read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == ["0", "1"]
    assert registry.get_sample_value("inferpool_payload_log_records_total", {"outcome": "written"}) == 2


def test_json_access_line_carries_the_fields_not_their_text():
    fields = {"request_id": "r1", "route": "/predict", "status": 200, "trace_id": None, "bytes_in": 10}
    record = logging.LogRecord("inferpool.access", logging.INFO, "", 0, "%s", ("text",), None)
    record.access = fields
    record.request_id = "r1"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "access"
    assert (line["route"], line["status"], line["bytes_in"], line["request_id"]) == ("/predict", 200, 10, "r1")
    assert "trace_id" not in line  # absent, not null


def test_answered_bodies_are_copied_without_decoding_unless_redacted():
    body = b'{"inputs": {"text": "secret", "n": [1, 2]}}'
    as_is = http_payload(body, None, None, frozenset(), parsed=True)
    assert isinstance(as_is, orjson.Fragment)
    assert orjson.loads(orjson.dumps({"request": as_is})) == {"request": orjson.loads(body)}
    redacted = http_payload(body, None, None, frozenset({"text"}), parsed=True)
    assert redacted == {"inputs": {"text": REDACTED, "n": [1, 2]}}


def test_plain_access_line_is_key_value_pairs():
    fields = {"method": "POST", "route": "/predict", "status": 200, "trace_id": None, "duration_ms": 0.5}
    record = logging.LogRecord("inferpool.access", logging.INFO, "", 0, "%s", (_Line(fields),), None)
    RequestIdFilter().filter(record)
    line = FORMATTERS["plain"]().format(record)
    assert line.endswith("inferpool.access [-] method=POST route=/predict status=200 duration_ms=0.5")
