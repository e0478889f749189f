"""loadtest/apart.py: the load generator's own process never maps the served model's libraries,
which would keep the supervisor's loading code resident and inflate the tree's PSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from loadtest.apart import run_apart

REPO = Path(__file__).resolve().parents[3]
PROBE = """
import json, sys
from pathlib import Path
from loadtest.compare_triton import triton_command
from loadtest.workloads import limits_apart
limit = limits_apart("digits", 0.2)
argv = triton_command("/triton/python")(1234)
maps = Path("/proc/self/maps").read_text()
print(json.dumps({
    "limit": limit, "onnx": argv[argv.index("--onnx") + 1],
    "imported": sorted({"torch", "onnxruntime"} & set(sys.modules)),
    "mapped": sorted({name for name in ("libtorch", "onnxruntime") if name in maps}),
}))
"""


def test_runs_in_another_process_that_is_gone_after():
    assert run_apart(os.getpid) != os.getpid()
    assert not __import__("multiprocessing").active_children()


def test_compare_measures_the_limit_and_exports_for_triton_without_mapping_torch_or_onnxruntime():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["imported"] == [], found
    assert found["mapped"] == [], found
    assert found["limit"]["one_stream"] > 0, found
    assert found["limit"]["every_core"] > 0, found
    assert Path(found["onnx"]).is_file(), found
