"""What only the native gRPC front end (pygrpc-native) needs checked, on real servers: its tokio
runtime starts in each serving process after the supervisor's fork (never in the supervisor,
whose fork would copy its threads' state but not the threads), calls spread over those
processes with tritonclient.grpc, and the health service's Watch stream, which it answers
itself (tests/e2e/service/test_grpc.py runs every other gRPC test on both front ends)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferpool.harness.server import free_port, run_server, wait_ready

NATIVE_THREAD = "grpc-native-io"  # what pygrpc-native names its tokio threads


def _threads(pid: int) -> list[str]:
    tasks = Path(f"/proc/{pid}/task")
    return [(task / "comm").read_text().strip() for task in tasks.iterdir()]


def _thread_ids(pid: int) -> list[tuple[int, str]]:
    tasks = Path(f"/proc/{pid}/task")
    return [(int(task.name), (task / "comm").read_text().strip()) for task in tasks.iterdir()]


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    port = free_port()
    logs = tmp_path_factory.mktemp("logs")
    with run_server(logs, "--workers", "2", "--grpc-port", str(port), "--grpc-server", "native") as server:
        wait_ready(server)
        yield server, f"127.0.0.1:{port}"


def test_tokio_starts_in_each_serving_process_not_in_the_supervisor(served, images, reference):
    server, target = served
    for _ in range(8):  # new connections: the kernel spreads them over the processes (SO_REUSEPORT)
        with triton.InferenceServerClient(target) as client:
            image = triton.InferInput("image", list(images.shape), "FP32")
            image.set_data_from_numpy(images)
            labels = client.infer("digits", [image]).as_numpy("label")
            np.testing.assert_array_equal(labels, reference(images)[1])
    supervisor = server.process.pid
    assert NATIVE_THREAD not in _threads(supervisor)
    serving = _children(supervisor)
    assert len(serving) == 2, serving
    for pid in serving:
        assert NATIVE_THREAD in _threads(pid), (pid, _threads(pid))
        # Its threads (tokio's, and the one handing calls to the loop) do not preempt the
        # event loop when a call or an answer wakes them; the loop's own thread is as it was.
        threads = _thread_ids(pid)
        batch = {tid for tid, _ in threads if os.sched_getscheduler(tid) == os.SCHED_BATCH}
        native = {tid for tid, name in threads if name == NATIVE_THREAD}
        assert native < batch, threads
        assert len(batch) == len(native) + 1, threads
        assert os.sched_getscheduler(pid) == os.SCHED_OTHER


def test_health_watch_streams_the_status(served):
    with grpc.insecure_channel(served[1]) as channel:
        health: Any = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"), timeout=5)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        unknown = health.Watch(health_pb2.HealthCheckRequest(service="other"), timeout=5)
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN  # as grpcio's Watch says
        unknown.cancel()
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
