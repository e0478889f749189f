"""loadtest.bench: the table of cases, ``--list``, each case's options, and the cheap in-process
cases run for real with tiny counts (their figures are not checked, only that they are figures).
The cases that start servers or load MiniLM run in tests/e2e/loadtest/test_bench.py."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest import bench
from loadtest.bench import CASES, PROG
from loadtest.bench.__main__ import main

REPO = Path(__file__).resolve().parents[3]
# The old loadtest/bench_<name>.py scripts kept as cases, by family; the rest of the 29 went
# (spin, idle_gap, spread, aoti_freezing) or stay as scripts the precision work owns (bf16, precision).
FAMILIES = {
    "pool": {"pool"},
    "batching": {"batching", "minilm", "batching_http"},
    "engine_request": {"engine_request"},
    "backends": {"backends", "auto", "defaults"},
    "static": {"static"},
    "aoti": {"aoti"},
    "app_cpu": {"app_cpu"},
    "lane_cpu": {"lane_cpu"},
    "cache_cpu": {"cache_cpu"},
    "http_cpu": {"http_cpu", "fronts"},
    "lone_request": {"lone"},
    "wire": {"codec", "embeddings"},
    "metrics_cost": {"metrics"},
    "observability": {"door_cost", "observe"},
    "handoff": {"handoff"},
    "serving": {"door", "start", "wide", "processes"},
    "memory": {"memory"},
    "grpc_front": {"grpc"},
    "container": {"container"},
    "text_peers": {"text_peers"},
    "response_cache": {"response_cache"},
    "priorities": {"priorities"},
    "idle_gap": {"idle_gap"},
    "timeline": {"timeline"},
}


def test_every_case_lives_in_its_family_module_with_a_runner_and_a_parser():
    assert {name: case.module for name, case in CASES.items()} == {
        name: module for module, names in FAMILIES.items() for name in names
    }
    for name in CASES:
        assert callable(bench.runner(name))
        parser = bench.parser(name)
        assert parser.prog == f"{PROG} {name}"
        assert parser.description, name  # --help says what the case measures
        parser.parse_args([])  # every option has a default: the bare command runs the case as documented


def test_only_the_scripts_the_precision_work_owns_are_left_at_the_top():
    left = sorted(path.name for path in (REPO / "loadtest").glob("bench_*.py"))
    assert left == ["bench_bf16.py", "bench_precision.py"]


def test_the_old_script_names_are_nowhere_but_in_the_docs():
    """Makefile, code and tests name ``loadtest.bench <case>``; git grep exits 1 when nothing matches."""
    git = shutil.which("git")
    assert git is not None
    pattern = rf"loadtest[./]bench_({'|'.join(CASES)})\b"
    found = subprocess.run(
        [git, "grep", "-n", "-E", pattern, "--", ".", ":!docs", ":!README.md"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert found.returncode == 1, found.stdout


def test_list_prints_one_line_per_case_in_table_order(capsys):
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(CASES)
    for line, case in zip(lines, CASES.values(), strict=True):
        assert line.endswith(case.summary)


def test_no_case_or_an_unknown_one_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "pool" in capsys.readouterr().out
    assert main(["bench_pool"]) == 2
    assert "unknown case 'bench_pool'" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_the_module_runs_as_python_dash_m():
    listed = subprocess.run(
        [sys.executable, "-m", "loadtest.bench", "--list"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert listed.stdout.split("\n", 1)[0].startswith("pool ")
    assert "torch" not in subprocess.run(  # --list stays cheap: no case module, no torch
        [sys.executable, "-c", "import sys, loadtest.bench.__main__ as m; m.listing(); print(sorted(sys.modules))"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@pytest.mark.parametrize(
    ("name", "argv", "expected"),
    [
        ("pool", ["--iterations", "10"], {"iterations": 10, "repeats": 5}),
        (
            "batching",
            ["--clients", "4"],
            {"clients": 4, "backends": ["eager", "onnxruntime"], "batch_sizes": [1, 8, 32]},
        ),
        ("minilm", ["--clients", "1", "8"], {"clients": [1, 8], "batch_sizes": [1, 16], "delay_us": 2000.0}),
        ("batching_http", ["--suite", "digits"], {"suite": ["digits"], "clients": 32}),
        ("defaults", ["--startup", "digits", "auto"], {"startup": ["digits", "auto"], "repeats": 2}),
        ("auto", ["--model", "a:b", "--model", "c:d"], {"model": ["a:b", "c:d"], "repeats": 3}),
        ("aoti", ["--overhead"], {"overhead": True, "models": ["mlp", "digits"], "rss_models": ["digits", "wide"]}),
        ("door_cost", [], {"base": None, "requests": 20000, "rounds": 5}),
        ("observe", ["--base", "/tmp/x"], {"base": Path("/tmp/x"), "connections": [8, 64]}),
        ("start", ["--runs", "1", "--", "--workers", "1"], {"runs": 1, "extra": ["--workers", "1"]}),
        ("metrics", ["--one-process"], {"one_process": True, "child": False, "rounds": 15}),
        ("grpc", [], {"seconds": 5.0, "rounds": 3, "echo_server": None}),
        ("app_cpu", ["--path", "/v2/models/digits/infer"], {"path": "/v2/models/digits/infer", "bare": False}),
        ("embeddings", ["--codec"], {"codec": True, "sentences": [1, 16], "in_process_only": False}),
        ("container", ["--docker-arg=--memory=2g"], {"image": "inferpool:test", "docker_arg": ["--memory=2g"]}),
    ],
)
def test_a_case_keeps_the_options_of_its_old_script(name, argv, expected):
    args = vars(bench.parser(name).parse_args(argv))
    assert {key: args[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("name", "argv"),
    [("batching_http", ["--suite", "resnet"]), ("app_cpu", ["--path", "/nope"]), ("aoti", ["--models", "x"])],
)
def test_a_case_refuses_what_it_cannot_run(name, argv, capsys):
    with pytest.raises(SystemExit):
        bench.parser(name).parse_args(argv)
    assert "invalid choice" in capsys.readouterr().err


def test_pool(capsys):
    figures = bench.runner("pool")(["--iterations", "2000", "--repeats", "1"])
    assert isinstance(figures, dict)
    assert len(figures) == 7
    assert all(0 < ns < 1e6 for ns in figures.values()), figures
    assert "RuntimePool.borrow() context manager" in capsys.readouterr().out


def test_batching_in_process(capsys):
    argv = ["--backends", "eager", "--batch-sizes", "1", "4", "--clients", "2", "--seconds", "0.2"]
    runs = bench.runner("batching")([*argv, "--repeats", "1", "--warmup", "0.05"])
    assert isinstance(runs, dict)
    assert set(runs) == {("eager", 1), ("eager", 4)}
    for (_, size), (run,) in runs.items():
        assert run["rps"] > 0
        assert 0 < run["p50_ms"] <= run["p99_ms"]
        assert 1 <= run["batch"] <= size
    assert "eager: max_batch_size 4 vs off:" in capsys.readouterr().out


def test_engine_request():
    found = bench.runner("engine_request")(["--requests", "100", "--repeats", "2"])
    assert isinstance(found, dict)
    assert set(found) == {"infer", "call"}
    for values in found.values():
        assert len(values) == 2
        assert 0 < values[0] <= values[1]  # least first


def test_backends_and_static(capsys):
    figures = bench.runner("backends")(["--backends", "eager,onnxruntime", "--rounds", "1", "--calls", "8"])
    assert isinstance(figures, dict)
    assert set(figures) == {(name, b) for name in ("eager", "onnxruntime") for b in (1, 32)}
    for row in figures.values():
        assert row["us_per_call"] > 0
        assert row["calls_per_s"] > 0
        assert row["scaling"] > 0
    assert "onnxruntime vs eager at batch 1:" in capsys.readouterr().out
    static = bench.runner("static")(["--models", "mlp", "--rows", "static", "--rounds", "1", "--calls", "8"])
    assert isinstance(static, dict)
    assert set(static) == {("mlp", row, b) for row in ("eager", "static") for b in (1, 32)}
    assert all(us > 0 for us in static.values())


def test_defaults_startup_with_a_named_backend():
    rows = bench.runner("defaults")(["--startup", "mlp", "eager"])
    assert isinstance(rows, list)
    (row,) = rows
    assert row["backend"] == "eager"
    assert row["dispatch"] == "threads"  # only auto measures the dispatch
    assert row["load_s"] >= 0


def test_app_cpu(capsys):
    found = bench.runner("app_cpu")(["--requests", "30", "--repeats", "2"])
    assert isinstance(found, list)
    assert len(found) == 2
    assert 0 < found[0] <= found[1]
    assert capsys.readouterr().out.startswith("/predict: CPU per request min")


@pytest.mark.parametrize("stub", [[], ["--stub", "engine"], ["--stub", "door"]])
def test_lane_cpu_answers_every_request_through_the_protocol(stub, capsys):
    found = bench.runner("lane_cpu")(["--connections", "4", "--wakeups", "5", "--repeats", "2", *stub])
    assert isinstance(found, list)
    assert len(found) == 2
    assert 0 < found[0] <= found[1]
    assert capsys.readouterr().out.startswith("v2-json, 4 connections")
    from inferpool.engine.serving.served import ServedModel
    from inferpool.service.frontdoor import FrontDoor

    assert ServedModel.infer_inline.__name__ == FrontDoor.infer_inline.__name__ == "infer_inline"  # as they were
    assert ServedModel.infer.__name__ == FrontDoor.infer.__name__ == "infer"


def test_lane_cpu_feeds_resnet_bodies_in_socket_sized_pieces(capsys):
    argv = ["--body", "resnet-v2-binary", "--stub", "engine", "--chunk", "65536"]
    found = bench.runner("lane_cpu")([*argv, "--connections", "2", "--wakeups", "3", "--repeats", "2"])
    assert isinstance(found, list)
    assert len(found) == 2
    assert 0 < found[0] <= found[1]
    assert "resnet-v2-binary, 2 connections, engine stubbed, 65536-byte pieces" in capsys.readouterr().out


@pytest.mark.parametrize("traffic", ["miss", "hit"])
def test_cache_cpu_measures_each_size_and_way_of_looking_against_the_cache_off(traffic, capsys):
    args = ["--traffic", traffic, "--cache-mb", "0", "0.05", "--rounds", "2", "--connections", "2", "--wakeups", "5"]
    found = bench.runner("cache_cpu")([*args, "--hot", "4"])
    assert isinstance(found, dict)
    assert [(setup.megabytes, setup.looks) for setup in found] == [(0.0, ""), (0.05, "sampled"), (0.05, "every")]
    assert all(len(spent) == 2 and min(spent) > 0 for spent in found.values())
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{traffic}, v2-json, cache off: CPU per request median")
    for line, looks in zip(lines[1:], ("sampled", "every"), strict=True):
        assert f"MB, {looks} looks: CPU per request median" in line
        assert "x off; " in line
        assert line.endswith("µs, paired by round)")
    from inferpool.service import cache_sampling

    assert cache_sampling.QUIET == 4096  # held off for the rounds that look at every request only


def test_app_cpu_and_engine_request_also_run_as_files_against_a_checkout():
    """``PYTHONPATH=CHECKOUT python loadtest/bench/app_cpu.py``: nothing of loadtest is imported at
    the top, so the file runs on whichever tree's inferpool comes first."""
    for name in ("app_cpu", "lane_cpu", "engine_request"):
        source = (REPO / "loadtest/bench" / f"{name}.py").read_text()
        assert "\nfrom loadtest" not in source
        assert "\nimport loadtest" not in source
        assert f'if __name__ == "__main__":\n    {name}()' in source
    done = subprocess.run(
        [sys.executable, str(REPO / "loadtest/bench/engine_request.py"), "--requests", "50", "--repeats", "1"],
        cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.startswith("inline, lists: infer min")


def test_codec_in_process(capsys):
    figures = bench.runner("codec")(["--in-process-only"])
    assert isinstance(figures, dict)
    paths = ("/predict JSON", "v2 JSON", "v2 binary")
    assert set(figures) == {(case, path) for case in ("image 1x3x224x224", "digit 1x1x8x8") for path in paths}
    assert all(set(row) == {"codec_us"} and row["codec_us"] > 0 for row in figures.values())  # no server
    # The image is where binary pays: no text to parse (tens of times less work, not a close call).
    image = {path: figures["image 1x3x224x224", path]["codec_us"] for path in paths}
    assert image["v2 binary"] < image["v2 JSON"] / 5
    assert "e2e p50 ms" in capsys.readouterr().out


def test_auto_picks_among_the_candidates_every_repeat(capsys):
    argv = ["--model", "inferpool.engine.zoo.mlp:build", "--backends", "eager,onnxruntime", "--repeats", "2"]
    chosen = bench.runner("auto")(argv)
    assert isinstance(chosen, dict)
    (wins,) = chosen.values()
    assert sum(wins.values()) == 2
    assert set(wins) <= {"eager", "onnxruntime"}
    assert "chosen" in capsys.readouterr().out


def test_embeddings_codec_in_process():
    argv = ["--in-process-only", "--sentences", "1", "16", "--codec-rounds", "20"]
    figures = bench.runner("embeddings")(argv)
    assert isinstance(figures, dict)
    assert set(figures) == {(n, route) for n in (1, 16) for route in ("predict", "v1-float", "v1-base64")}
    assert all(us > 0 for us in figures.values())


def test_metrics(capsys):
    nets = bench.runner("metrics")(["--requests", "300", "--rounds", "2", "--one-process"])
    assert isinstance(nets, dict)
    assert set(nets) == {False, True}
    for net in nets.values():
        assert set(net) == {"old", "new"}
        assert all(len(rounds) == 2 for rounds in net.values())
    assert "one process: µs per request" in capsys.readouterr().out


def test_door_cost_against_a_base_checkout(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    access = logging.getLogger("inferpool.access")
    handlers, propagate = list(access.handlers), access.propagate
    base = tmp_path / "base"
    (base / "service/http").mkdir(parents=True)
    shutil.copy(REPO / "service/http/middleware.py", base / "service/http/middleware.py")
    best = bench.runner("door_cost")(["--base", str(base), "--requests", "200", "--rounds", "1"])
    assert isinstance(best, dict)
    assert set(best) == {"base", "off", "tracing", "unsampled", "access", "encode"}
    assert all(us > 0 for us in best.values())
    assert "µs vs base" in capsys.readouterr().out
    # The run leaves the process as it found it (the suite's other tests log and trace in it).
    assert "OTEL_TRACES_EXPORTER" not in os.environ
    assert (access.handlers, access.propagate) == (handlers, propagate)


def test_door_cost_refuses_a_base_without_the_door(tmp_path):
    with pytest.raises(SystemExit, match=r"middleware\.py"):
        bench.runner("door_cost")(["--base", str(tmp_path), "--requests", "10", "--rounds", "1"])


def test_handoff_in_process():
    figures = bench.runner("handoff")(["--in-process-only", "--in-process-seconds", "0.1"])
    assert isinstance(figures, dict)
    assert set(figures) == {
        f"{what}, {mode}{suffix}"
        for mode in ("inline", "threads")
        for what, suffix in (("infer() round trip", ""), ("model call alone", " setup"))
    }
    assert all(us > 0 for us in figures.values())


def test_aoti_rows_are_runtime_options_the_engine_accepts():
    """aoti compiles for minutes, so only what it asks of the engine is checked here."""
    from loadtest.bench import aoti

    for row, (backend, interface) in aoti.ROWS.items():
        options = aoti.options(row, (1, 32), "/tmp/cache")
        assert (options.backend, options.aoti_interface) == (backend, interface)
        assert options.compiled_batch_sizes == (1, 32)
    assert aoti.aoti_parser().parse_args(["--rss-child", "digits", "eager"]).rss_child == ["digits", "eager"]


def test_http_cpu_script_sends_the_body_and_stops_after_the_count(tmp_path):
    from inferpool.harness.payloads import digits_v2_json
    from loadtest.bench.http_cpu import STOPPED, lua_script

    payload = digits_v2_json()
    script = lua_script(payload, 1234, tmp_path).read_text()
    assert "answered == 1234" in script
    assert STOPPED in script
    assert "wrk.thread:stop()" in script
    assert 'wrk.headers["content-type"] = "application/json"' in script
    body = script.split('io.open("', 1)[1].split('"', 1)[0]
    assert Path(body).read_bytes() == payload.body


def test_a_profiled_serving_process_writes_its_profile_when_it_returns(tmp_path):
    import pstats

    from loadtest.cprofile_serve import profiled

    def serve(code: int) -> int:
        return sum(range(1000)) * 0 + code

    assert profiled(serve, tmp_path)(3) == 3
    (written,) = tmp_path.glob("serving-*.prof")
    assert any(name == "serve" for _, _, name in pstats.Stats(str(written)).stats)  # type: ignore[attr-defined]


def test_http_cpu_new_images_script_makes_every_request_anew_from_its_own_serial(tmp_path):
    from inferpool.harness.payloads import digits_json
    from loadtest.bench.http_cpu import STOPPED, http_cpu_parser, lua_script
    from loadtest.bench.new_images import SERIALS_APART

    first, second = (lua_script(digits_json(), 500, tmp_path, new_each_time=True).read_text() for _ in range(2))
    assert "request = function()" in first
    assert STOPPED in first
    assert "answered == 500" in first
    assert 'wrk.headers["content-type"] = "application/json"' in first
    assert """'{"inputs":[[' .. table.concat(rows, ",") .. ']]}'""" in first  # one 1x8x8 image, as /predict takes it
    starts = [int(text.split("local sent = ", 1)[1].split()[0]) for text in (first, second)]
    assert starts[1] - starts[0] == SERIALS_APART  # a later run never repeats an earlier one's images
    args = http_cpu_parser().parse_args(["--serve", "on=--response-cache-mb 64", "--body", "predict-new"])
    assert args.serve == ["on=--response-cache-mb 64"]
    assert args.body == ["predict-new"]


def test_idle_gap_sleeps_the_gap_before_each_call_and_times_only_the_call():
    from loadtest.bench.idle_gap import rounds

    stamps: list[float] = []
    found = rounds(lambda: stamps.append(time.perf_counter()), [0.0, 0.02], calls=3, count=2)
    assert [sorted(medians) for medians in found] == [[0.0, 0.02]] * 2
    assert all(seconds < 0.01 for medians in found for seconds in medians.values())  # the sleep is not timed
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert sum(gap >= 0.02 for gap in gaps) >= 5  # each call of the 20 ms blocks came after its sleep
