"""The table of gRPC front ends and the rule ``grpc_server = "auto"`` follows."""

from __future__ import annotations

import pytest

from inferpool.config import load_settings
from inferpool.config.grpc import GRPC_SERVER_NAMES, grpc_server_for
from inferpool.service.grpc.native import NativeFrontEnd
from inferpool.service.grpc.server import GRPC_SERVERS, GrpcFrontEnd


def test_every_name_but_auto_is_a_front_end():
    assert set(GRPC_SERVERS) == set(GRPC_SERVER_NAMES) - {"auto"}
    assert {"native": NativeFrontEnd, "grpcio": GrpcFrontEnd} == GRPC_SERVERS


@pytest.mark.parametrize(
    ("choice", "mode", "served_by"),
    [
        ("auto", "none", "native"),  # no process is ever replaced: the cheaper server
        ("auto", "explicit", "grpcio"),  # loads and unloads replace processes: GOAWAY at once
        ("auto", "poll", "grpcio"),
        ("native", "explicit", "native"),  # a choice is kept as given
        ("grpcio", "none", "grpcio"),
    ],
)
def test_auto_picks_native_unless_processes_get_replaced(choice, mode, served_by):
    assert grpc_server_for(choice, mode) == served_by


def test_the_default_is_auto():
    assert load_settings(None, []).grpc_server == "auto"
