"""The one settings class. Sources, highest priority first: CLI flags, ``INFERPOOL_*``
environment variables (nested with ``__``: ``INFERPOOL_RUNTIME__BACKEND=eager``), the config
file (``--config FILE``, else ``default.toml`` beside this module), the defaults below.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from inferpool.config import traffic
from inferpool.config.grpc import GRPC_SERVER_NAMES, check_grpc_server
from inferpool.config.observability import check_payload_sink, check_tracing
from inferpool.config.paths import ConfigFileSource
from inferpool.engine import BACKENDS, DEFAULT_MODEL, RuntimeOptions
from inferpool.engine.backends import backend_names
from inferpool.engine.models.source_kinds import ARCHIVE_SUFFIXES, kind_of

DEFAULT_CONFIG_FILE = Path(__file__).with_name("default.toml")
AUTH_EXEMPT = ("/health/live", "/health/ready", "/metrics", "/v2/health/live", "/v2/health/ready")
_config_file: ContextVar[Path] = ContextVar("config_file", default=DEFAULT_CONFIG_FILE)


def check_source(value: str) -> str:
    if Path(value).suffix in ARCHIVE_SUFFIXES:
        if not Path(value).is_file():
            raise ValueError(f"model archive {value!r} does not exist; give the path of an existing archive file")
    elif kind_of(value) == "folder" and not Path(value).is_dir():
        raise ValueError(
            f"model {value!r} must be 'package.module:function', a path ending in .pt2 "
            "(or .ts for a legacy TorchScript archive, .onnx for an ONNX model), or an existing Hugging Face "
            "model folder"
        )
    return value


HANDLER_HELP = (
    "Pre-/post-processing for the model, 'package.module:attr' (see engine/models/handlers.py): turns a request's "
    "payload (e.g. text) into its input tensors and its outputs into the answer, on the worker thread. "
    "Unset = tensors in, tensors out."
)


def check_handler(value: str) -> str:
    if ":" not in value:
        raise ValueError(f"handler {value!r} must be 'package.module:attr'")
    return value


def check_backend(value: RuntimeOptions) -> RuntimeOptions:
    if value.backend not in backend_names():
        raise ValueError(
            f"runtime.backend {value.backend!r} is unknown; choose one of {sorted(BACKENDS)} or 'auto' "
            "(the default: time the candidates in auto_backends at startup and serve with the fastest)"
        )
    return value


class ModelEntry(BaseModel):
    """One more model served beside the default one (``[[models]]`` in the config file)."""

    model_config = ConfigDict(extra="forbid")

    source: Annotated[str, AfterValidator(check_source)] = Field(
        description="A factory 'package.module:function', a torch.export archive 'path/model.pt2', or a "
        "Hugging Face encoder folder 'path/folder' (embedder, cross-encoder or classifier; docs/models.md)."
    )
    name: str | None = Field(
        None, description="Name in URLs (/predict/{name}, /v2/models/{name}); default: the model's own."
    )
    runtime: Annotated[RuntimeOptions, AfterValidator(check_backend)] | None = Field(
        None, description="Runtime options for this model; default: the top-level [runtime]."
    )
    handler: Annotated[str, AfterValidator(check_handler)] | None = Field(None, description=HANDLER_HELP)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERPOOL_",
        env_nested_delimiter="__",
        extra="forbid",
        cli_prog_name="inferpool serve",
        cli_kebab_case=True,
        cli_implicit_flags=True,
    )

    model: str = Field(
        DEFAULT_MODEL,
        description="What to serve: a factory 'package.module:function' returning inferpool.engine.ModelSpec, "
        "a torch.export archive 'path/model.pt2', or a Hugging Face encoder folder 'path/folder' (served with "
        "its own handler; docs/models.md). The default is the built-in digits CNN.",
    )
    handler: Annotated[str, AfterValidator(check_handler)] | None = Field(None, description=HANDLER_HELP)
    app_dir: Path = Field(
        Path("."),
        description="Folder that 'package.module:attr' models and handlers import from, first on the import "
        "path (as uvicorn's --app-dir); default: the current directory. In a config file, relative to the file.",
    )
    host: str = Field("127.0.0.1", description="Address to listen on; 0.0.0.0 inside a container.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 picks a free one).")
    grpc_port: int = Field(
        8001,
        ge=0,
        le=65535,
        description="TCP port of the Open Inference Protocol v2 over gRPC (and the gRPC health service), "
        "on the same host; 0 = gRPC off. Messages up to max_body_bytes.",
    )
    grpc_server: str = Field(
        "auto",
        description=f"The gRPC front end, one of {list(GRPC_SERVER_NAMES)}: auto = native (pygrpc-native, "
        "less CPU per call) unless model_control_mode is explicit or poll, then grpcio (config/grpc.py says why).",
    )
    max_queue: int = Field(
        64,
        ge=0,
        description="Requests allowed to wait beyond those running; more get an immediate 503 "
        "with Retry-After. Lower it for tighter latency under overload, raise it for bursty load.",
    )
    request_timeout_ms: float = Field(
        30_000,
        ge=0,
        description="Default deadline per request in ms (0 = none); a client can set its own with the "
        "X-Request-Timeout-Ms header or the v2 'timeout' parameter (µs). Past its deadline a request is "
        "answered 504; one that could not finish in time given the queue ahead is refused at once (503).",
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description="Largest request body accepted (413 above it), checked before the body is buffered.",
    )
    response_cache_mb: traffic.ResponseCacheMb = 0  # these four: config/traffic.py
    response_cache_models: traffic.ResponseCacheModels = None
    priority_levels: traffic.PriorityLevels = 1
    default_priority: traffic.DefaultPriority = 1
    switch_interval: float = Field(
        0.0005,
        gt=0,
        le=0.1,
        description="CPython's GIL switch interval in seconds (sys.setswitchinterval). Python's "
        "5 ms default makes a worker thread wait up to 5 ms for the event loop to yield the GIL; "
        "a shorter interval cuts that hand-off latency at a small throughput cost.",
    )
    drain_seconds: int = Field(
        10,
        ge=0,
        description="On SIGTERM, how long requests already accepted may take to finish before the "
        "server exits. Keep Kubernetes' terminationGracePeriodSeconds above preStop sleep + this.",
    )
    read_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="A request's headers must arrive within this many seconds of its first byte, and a body "
        "may not pause longer between two reads; otherwise the connection is closed (a 408 when no route has "
        "it yet). Stalled and slowloris clients hold nothing for longer.",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Open connections per serving process; one more is answered 503 with Retry-After and "
        "closed before it is read. Idle keep-alive connections count: raise it for large client pools.",
    )
    workers: int = Field(
        0,
        ge=0,
        description="Serving processes, forked after the models load so that they share one copy of "
        "the weights; each gets an equal share of the CPUs. 0 = one per num_runtimes x intra_op_threads "
        "CPUs of the budget (affinity and cgroup quota): with the defaults, one per usable CPU, since "
        "one process's HTTP work tops out near one core.",
    )
    metrics_dir: Path | None = Field(
        None,
        description="Where the serving processes share Prometheus metrics (wiped at start); "
        "default: a fresh directory under the system temp dir.",
    )
    api_key: SecretStr | None = Field(
        None,
        description="When set, every route except auth_exempt needs 'Authorization: Bearer <key>' or "
        "'X-API-Key: <key>' (401 otherwise). Pass it by env (INFERPOOL_API_KEY), not on the command line.",
    )
    auth_exempt: list[str] = Field(
        default_factory=lambda: list(AUTH_EXEMPT),
        description="Paths reachable without the API key: health probes and the metrics scrape by default.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins allowed to call the API (e.g. https://app.example.com); empty = CORS off. "
        "'*' is refused: name the origins.",
    )
    latency_buckets: list[float] | None = Field(
        None,
        description="Bucket bounds in seconds for the latency histograms (end to end, queue, inference, "
        "overhead); default: 25 µs to 10 s. Set them around your SLO, e.g. [0.005, 0.01, 0.02, 0.05, 0.1].",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log verbosity.")
    log_format: Literal["plain", "json"] = Field(
        "plain", description="'json' for one JSON object per line (log shippers), 'plain' for people."
    )
    tracing: bool = Field(
        False,
        description="Export OpenTelemetry traces: a server span per model request (inferpool.predict, gRPC "
        "ModelInfer) with its phases as children, continuing the caller's W3C traceparent. Needs the otel extra "
        "(pip install 'inferpool[otel]'); exporter and endpoint from the standard OTEL_* variables "
        "(OTEL_EXPORTER_OTLP_ENDPOINT, default OTLP over HTTP to localhost:4318).",
    )
    trace_sample: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Fraction of requests without a sampled parent that are traced (parent-based: a caller's "
        "sampled or unsampled traceparent is followed). OTEL_TRACES_SAMPLER(_ARG), when set, replace it.",
    )
    access_log: bool = Field(
        False,
        description="One log line per request (JSON fields with log_format='json'): request and trace id, "
        "route or RPC, model, version, status, bytes in and out, duration and phase times.",
    )
    access_log_sample: float = Field(1.0, ge=0, le=1, description="Fraction of requests the access log records.")
    payload_log: str | None = Field(
        None,
        description="Where sampled copies of model requests and answers go: a JSON-lines file path, '-' for "
        "stdout, or an http(s):// URL receiving CloudEvents (as KServe's logger sends); unset = off.",
    )
    payload_log_sample: float = Field(1.0, ge=0, le=1, description="Fraction of model requests payload-logged.")
    payload_log_queue: int = Field(
        1000,
        ge=1,
        description="Records waiting for the payload log's sink; past it new ones are dropped and counted "
        "(inferpool_payload_log_records_total{outcome='dropped'}) rather than slowing any answer.",
    )
    payload_log_redact: list[str] = Field(
        default_factory=list,
        description="Input and output names whose values the payload log replaces with '[redacted]'.",
    )
    runtime: RuntimeOptions = Field(default_factory=RuntimeOptions, description="Engine runtime options.")
    models: list[ModelEntry] = Field(
        default_factory=list,
        description="Further models to serve beside 'model', each at /predict/{name} and /v2/models/{name}; "
        "the CPUs are split equally between all models' pools.",
    )

    model_repository: Path | None = Field(
        None,
        description="A model repository: one folder per model (its name in URLs), numbered version folders in "
        "each, holding a .pt2 or TorchScript archive or a config.toml naming the source (docs/repository.md). "
        "The versions each model's version_policy selects are served beside 'model' and [[models]].",
    )
    model_control_mode: Literal["none", "explicit", "poll"] = Field(
        "none",
        description="How the repository's models change while serving: 'none' = only at start; 'explicit' = "
        "by POST /v2/repository/models/{name}/load and /unload (with the API key, when one is set); 'poll' = "
        "rescanned every repository_poll_seconds. Needs model_repository.",
    )
    repository_poll_seconds: float = Field(
        15.0,
        gt=0,
        description="With model_control_mode='poll', seconds between two scans of the repository; each change "
        "found is applied as an explicit load or unload would be.",
    )

    @field_validator("latency_buckets")
    @classmethod
    def _increasing(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (not value or value[0] <= 0 or any(b <= a for a, b in pairwise(value))):
            raise ValueError("latency_buckets must be positive and strictly increasing, e.g. [0.001, 0.01, 0.1]")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _explicit_origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin == "*" or not origin.startswith(("http://", "https://")):
                raise ValueError(f"CORS origin {origin!r} must be an explicit origin like 'https://app.example.com'")
        return value

    @model_validator(mode="after")
    def _distinct_ports(self) -> Settings:
        if self.grpc_port and self.grpc_port == self.port:
            raise ValueError(f"grpc_port and port are both {self.port}: give gRPC its own port (or 0 to turn it off)")
        return self

    @model_validator(mode="after")
    def _observability(self) -> Settings:
        if self.tracing:
            check_tracing(os.environ)
        if self.payload_log is not None:
            check_payload_sink(self.payload_log)
        return self

    @field_validator("auth_exempt")
    @classmethod
    def _control_always_keyed(cls, value: list[str]) -> list[str]:
        for path in value:
            if path.startswith("/v2/repository"):
                raise ValueError(f"auth_exempt {path!r}: the repository control routes always need the API key")
        return value

    @model_validator(mode="after")
    def _repository_for_control(self) -> Settings:
        if self.model_control_mode != "none" and self.model_repository is None:
            raise ValueError(
                f"model_control_mode={self.model_control_mode!r} needs a repository: set model_repository "
                "(--model-repository DIR), or leave model_control_mode='none'"
            )
        if self.model_repository is not None and not self.model_repository.is_dir():
            raise ValueError(
                f"model_repository {str(self.model_repository)!r} is not a directory; give an existing one"
            )
        return self

    _model_source = field_validator("model")(check_source)
    _known_backend = field_validator("runtime")(check_backend)
    _known_grpc_server = field_validator("grpc_server")(check_grpc_server)
    _priority_levels = model_validator(mode="after")(traffic.check_priorities)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, ConfigFileSource(settings_cls, toml_file=_config_file.get())


def load_settings(config_file: Path | None = None, cli_args: list[str] | None = None) -> Settings:
    """Build the settings; raises pydantic.ValidationError naming each bad value."""
    path = config_file or DEFAULT_CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist; pass an existing TOML file to --config")
    token = _config_file.set(path)
    try:
        return Settings(_cli_parse_args=cli_args or [])
    finally:
        _config_file.reset(token)
