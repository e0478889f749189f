"""Several serving processes forked from one supervisor (real servers, real HTTP): a drain
under load answers every request sent, readiness speaks for all processes, a killed process is
replaced without touching the others, and the weights are held once."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import numpy as np
import pytest

from inferpool.harness.metrics import metric_total
from inferpool.harness.server import Server, run_server, wait_ready
from loadtest.procs import tree_pss_bytes
from tests.support.drain_check import SAMPLE, looping_clients
from tests.support.extra_models import WIDE_WEIGHT_BYTES

# A request a call (max_batch_size 0 would batch its 20 ms calls): the drain counts requests in flight.
SLOW = ("--model", "tests.support.slow_model:slow_calls", "--runtime.backend", "eager", "--runtime.max-batch-size", "1")


def serving_pids(server: Server) -> list[int]:
    pid = server.process.pid
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_sigterm_under_load_answers_every_request_sent(tmp_path):
    with run_server(tmp_path, *SLOW, "--workers", "2", "--drain-seconds", "10") as server:
        wait_ready(server)
        # The probe's client is made first: making one (its TLS context) takes long enough, with
        # 16 client threads on the GIL, for the whole drain to end before it connects.
        with looping_clients(server.url) as load, httpx2.Client(timeout=10) as probe:
            load.wait_answered(100)
            sent_at = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            ready = probe.get(server.url + "/health/ready")
            while ready.status_code == 200 and time.monotonic() < sent_at + 1:  # the signal is on its way
                ready = probe.get(server.url + "/health/ready")
            exit_code = server.process.wait(30)
            exited_after = time.monotonic() - sent_at

    assert ready.status_code == 503, "readiness must turn 503 within a second"
    assert ready.json()["status"] == "stopping"
    assert exit_code == 0, server.output()
    assert exited_after < 10
    kinds = load.kinds()
    assert not load.lost(), kinds
    assert kinds["200"] > 50, kinds
    assert load.answered_after(sent_at), "in-flight requests must finish"
    assert all(not client.is_alive() for client in load.clients)
    assert server.output().count("drained: every accepted request was answered") == 2
    assert "new connections stopped before closing by: reuseport" in server.output()


def test_readiness_speaks_for_every_process_and_a_killed_one_is_replaced(tmp_path):
    errors_by_pid: dict[str, list[str]] = {}
    answered_by_pid: Counter[str] = Counter()
    stop = threading.Event()
    lock = threading.Lock()

    def keep_alive_client() -> None:
        with httpx2.Client(timeout=20) as http:
            pid = None
            while not stop.is_set():
                try:
                    response = http.post(server.url + "/predict", json=SAMPLE)
                    pid = response.headers["x-request-id"].split("-")[0]
                    assert response.status_code == 200, response.text
                    with lock:
                        answered_by_pid[pid] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is recorded against its process
                    with lock:
                        errors_by_pid.setdefault(pid or "?", []).append(repr(exc))
                    return  # this client's process is gone

    with run_server(tmp_path, *SLOW, "--workers", "2") as server:
        wait_ready(server)
        before = serving_pids(server)
        assert len(before) == 2
        clients = [threading.Thread(target=keep_alive_client) for _ in range(8)]
        for client in clients:
            client.start()
        time.sleep(1.0)
        victim = before[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        saw_unready = False
        while time.monotonic() < deadline:
            status = httpx2.get(server.url + "/health/ready").status_code
            saw_unready |= status == 503
            pids = serving_pids(server)
            if status == 200 and len(pids) == 2 and victim not in pids:
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"no replacement became ready:\n{server.output()}")
        time.sleep(0.5)
        stop.set()
        for client in clients:
            client.join(30)
        after = serving_pids(server)
        text = httpx2.get(server.url + "/metrics").text

    survivor = f"{before[1]:x}"
    assert answered_by_pid[survivor] > 0, answered_by_pid
    assert survivor not in errors_by_pid, errors_by_pid[survivor]
    assert set(errors_by_pid) <= {f"{victim:x}", "?"}, errors_by_pid
    assert before[1] in after
    assert victim not in after
    assert metric_total(text, "inferpool_process_replacements_total") == 1
    assert "exited with status -9: starting a replacement" in server.output()


def test_processes_share_one_copy_of_the_weights(tmp_path):
    footprints = {}
    for workers in ("1", "2"):
        args = ("--model", "tests.support.extra_models:wide", "--runtime.backend", "eager", "--workers", workers)
        with run_server(tmp_path, *args) as server:
            wait_ready(server)
            for _ in range(20):  # every process has served, so its lazily made state is counted
                httpx2.post(server.url + "/predict", json={"inputs": np.zeros((1, 2048)).tolist()})
            footprints[workers] = tree_pss_bytes(server.process.pid)
    extra = footprints["2"] - footprints["1"]
    # A second copy of the weights would add 128 MB; a serving process of its own adds its heap (~35 MB).
    assert extra < WIDE_WEIGHT_BYTES / 2, (footprints, extra / 2**20)


@pytest.mark.parametrize("backend", ["eager", "onnxruntime", "openvino"])
def test_more_intra_op_threads_after_a_fork_safe_load(tmp_path, images, reference, backend):
    # The supervisor loads with one intra-op thread (an OpenMP region before a fork hangs the
    # children); the serving process then runs with two, and must neither hang nor drift.
    args = ("--workers", "1", "--runtime.intra-op-threads", "2", "--runtime.backend", backend)
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        response = httpx2.post(server.url + "/predict", json={"inputs": images.tolist()}, timeout=30)
    assert response.status_code == 200, response.text
    probabilities, labels = reference(images)
    np.testing.assert_allclose(response.json()["outputs"]["probabilities"], probabilities, rtol=1e-4, atol=1e-5)
    assert response.json()["outputs"]["label"] == labels.tolist()
    if backend != "eager":  # the artifact's threads stayed in the parent (OpenVINO's would hang): rebuilt here
        assert f"built this process's own {backend} artifact for 2 intra-op threads" in server.output()


def test_openvino_streams_after_a_fork_safe_load(tmp_path, images, reference):
    # The supervisor compiles two streams for two runtimes; a forked process's first infer on
    # that compiled model hangs (measured), so each process compiles its own and answers
    # concurrent requests on both.
    args = ("--workers", "1", "--runtime.num-runtimes", "2", "--runtime.backend", "openvino")
    with run_server(tmp_path, *args) as server:
        wait_ready(server)
        with ThreadPoolExecutor(4) as pool:
            sent = [pool.submit(httpx2.post, server.url + "/predict", json={"inputs": images[i : i + 4].tolist()},
                                timeout=30) for i in range(0, 16, 4)]  # fmt: skip
            responses = [future.result() for future in sent]
        v2 = {
            "inputs": [
                {"name": "image", "shape": [3, 1, 8, 8], "datatype": "FP32", "data": images[:3].ravel().tolist()}
            ]
        }
        answer = httpx2.post(server.url + "/v2/models/digits/infer", json=v2, timeout=30)
        config = httpx2.get(server.url + "/v2/models/digits/config").json()
    assert config["backend"] == "openvino"
    assert answer.status_code == 200, answer.text
    by_name = {o["name"]: o for o in answer.json()["outputs"]}
    probabilities, labels = reference(images[:3])
    np.testing.assert_allclose(
        np.reshape(by_name["probabilities"]["data"], (3, 10)), probabilities, rtol=1e-4, atol=1e-5
    )
    assert by_name["label"]["data"] == labels.tolist()
    assert "built this process's own openvino artifact for 1 intra-op threads (2 runtimes)" in server.output()
    for i, response in zip(range(0, 16, 4), responses, strict=True):
        assert response.status_code == 200, response.text
        probabilities, labels = reference(images[i : i + 4])
        np.testing.assert_allclose(response.json()["outputs"]["probabilities"], probabilities, rtol=1e-4, atol=1e-5)
        assert response.json()["outputs"]["label"] == labels.tolist()
