"""The gRPC front end's choice, checked at start-up (the table itself, of servers by these
names, is service/grpc/server.py's GRPC_SERVERS: config/ imports no service code)."""

from __future__ import annotations

GRPC_SERVER_NAMES = ("auto", "native", "grpcio")
"""native: pygrpc-native's server in Rust, about half grpcio's CPU per call; grpcio: grpcio's
asyncio server. They differ in one guarantee: a serving process replaced after a model load or
unload stops taking calls at once with grpcio (GOAWAY, the calls running finish), so that a
caller's next call reaches a process serving the new set; the native server can only close its
connections outright, once no call runs, and a call sent in that instant fails UNAVAILABLE.
auto (the default): grpcio when model_control_mode replaces processes (explicit, poll), native
otherwise."""


def check_grpc_server(value: str) -> str:
    if value not in GRPC_SERVER_NAMES:
        raise ValueError(
            f"grpc_server {value!r} is unknown; choose one of {list(GRPC_SERVER_NAMES)} (auto, the default, "
            "picks native, the cheaper per call, unless model_control_mode loads and unloads models)"
        )
    return value


def grpc_server_for(choice: str, model_control_mode: str) -> str:
    """The front end ``choice`` names: auto resolved (see GRPC_SERVER_NAMES)."""
    if choice != "auto":
        return choice
    return "native" if model_control_mode == "none" else "grpcio"
