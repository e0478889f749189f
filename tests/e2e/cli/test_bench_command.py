"""`inferpool bench` for real: the command, its own model load, a real server subprocess."""

from __future__ import annotations

import json
import subprocess

import pytest

from inferpool.cli.bench_report import LABELS, format_table
from inferpool.engine.plan.threads import usable_cpus
from inferpool.harness.server import INFERPOOL

PHASES = ["bare", "engine", "http_json", "http_v2_binary", "grpc"]


@pytest.fixture(scope="module")
def report() -> dict:
    # Inline dispatch is not the default, so seeing it in the server's own answer shows that
    # the bench's settings reached the server it started; auto (between two quick backends)
    # shows that the server serves the backend the bench chose and timed bare.
    done = subprocess.run(
        [INFERPOOL, "bench", "--count", "40", "--rounds", "2", "--warmup", "5", "--seconds", "20", "--json",
         "--runtime.dispatch", "inline", "--runtime.num-runtimes", "1",
         "--runtime.backend", "auto", "--runtime.auto-backends", '["eager", "onnxruntime"]'],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_report_names_model_backend_and_thread_budget(report):
    assert report["model"] == "digits"
    assert report["source"] == "inferpool.engine.zoo.digits:build"
    assert report["backend_configured"] == "auto"
    assert report["backend"] in ("eager", "onnxruntime")
    assert report["auto"]["chosen"] == report["backend"]
    assert {row["backend"] for row in report["auto"]["candidates"]} == {"eager", "onnxruntime"}
    assert report["dispatch"] == "inline"
    threads = report["threads"]
    assert threads["runtimes"] == 1
    assert threads["intra_op_threads"] == 1
    assert threads["server_processes"] == usable_cpus()  # workers = 0: one per CPU at one runtime each
    assert threads["usable_cpus"] >= 1


def test_every_phase_is_timed_with_positive_numbers(report):
    assert list(report["timings"]) == PHASES
    for stats in report["timings"].values():
        assert stats["calls"] == 40
        assert 0 < stats["p50_us"] <= stats["p99_us"]
        assert stats["mean_us"] > 0
    assert set(report["client_cpu_us_per_request"]) == {"http_json", "http_v2_binary", "grpc"}
    assert all(cpu > 0 for cpu in report["client_cpu_us_per_request"].values())


def test_server_cpu_per_request_of_both_front_ends_beside_the_bare_app(report):
    cpu = report["server_cpu_us_per_request"]
    assert set(cpu) == {"http_json", "http_v2_binary", "grpc", "bare_asgi"}
    assert all(us > 0 for us in cpu.values()), cpu
    # Each server answered the same model call: none can have spent less than it per request.
    assert all(us > report["timings"]["bare"]["p50_us"] / 2 for us in cpu.values()), cpu
    assert report["grpc_server"] == "native"  # auto, with no model control
    assert f"gRPC v2 ModelInfer (native) {cpu['grpc']:.0f} µs" in format_table(report)


def test_overhead_is_the_phase_minus_the_bare_call(report):
    bare = report["timings"]["bare"]
    assert list(report["overhead"]) == PHASES[1:]
    for name, over in report["overhead"].items():
        stats = report["timings"][name]
        assert over["p50_us"] == pytest.approx(stats["p50_us"] - bare["p50_us"], abs=0.11)
        assert over["p99_us"] == pytest.approx(stats["p99_us"] - bare["p99_us"], abs=0.11)
        assert over["ratio_p50"] == pytest.approx(stats["p50_us"] / bare["p50_us"], abs=0.006)


def test_table_shows_every_phase_and_the_budget(report):
    text = format_table(report)
    for name in PHASES:
        assert LABELS[name] in text
    assert f"backend {report['backend']} (configured: auto), dispatch inline, 1 runtimes x 1 intra-op threads" in text
    assert f"{report['overhead']['http_json']['p50_us']:.1f}" in text


def test_invalid_settings_exit_2_with_the_reason():
    done = subprocess.run(
        [INFERPOOL, "bench", "--runtime.backend", "nonsense"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "runtime.backend 'nonsense' is unknown" in done.stderr


def test_a_handler_model_without_inputs_is_refused_before_loading(tmp_path):
    config = tmp_path / "handler.toml"
    config.write_text(
        'model = "inferpool.engine.zoo.digits:build"\nhandler = "inferpool.engine.zoo.minilm:MiniLMHandler"\n'
    )
    done = subprocess.run([INFERPOOL, "bench", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pass --inputs" in done.stderr


def test_the_platform_line_says_what_this_machine_makes_idle_gaps_cost(report):
    from inferpool.engine.plan import halt_polling

    assert report["platform"] == halt_polling.advice()  # the same machine reads the same sysfs
    lines = format_table(report).splitlines()
    platform = [line for line in lines if line.startswith("platform: ")]
    assert platform == ([] if report["platform"] is None else [f"platform: {report['platform']}"])
