"""Start-up checks of the observability settings (tracing's extra and OTEL_* variables, the
payload log's sink), kept beside the settings class that calls them."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

TRACE_EXPORTERS = ("otlp", "console", "none")  # OTEL_TRACES_EXPORTER values (service/telemetry/tracing.py's table)
OTLP_PROTOCOLS = ("http/protobuf", "grpc")


def check_tracing(environ: Mapping[str, str]) -> None:
    """Tracing needs the otel extra, and OTEL_* variables this server can act on."""
    for module in (
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry.exporter.otlp.proto.grpc",
    ):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ValueError(
                f"tracing needs the OpenTelemetry SDK and OTLP exporters ({module} is missing): "
                "pip install 'inferpool[otel]', or turn tracing off"
            )
    exporter = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter not in TRACE_EXPORTERS:
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter!r} is not supported; use one of {list(TRACE_EXPORTERS)}")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name)
        if protocol is not None and protocol.strip().lower() not in OTLP_PROTOCOLS:
            raise ValueError(f"{name}={protocol!r} is not supported; use one of {list(OTLP_PROTOCOLS)}")


def check_payload_sink(value: str) -> None:
    if value == "-" or value.startswith(("http://", "https://")):
        return
    parent = Path(value).parent
    if not parent.is_dir():
        raise ValueError(
            f"payload_log {value!r}: folder {str(parent)!r} does not exist; give a file in an existing folder, "
            "'-' for stdout, or an http(s):// URL"
        )
