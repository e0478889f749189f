from __future__ import annotations

import pytest

from inferpool.engine import ConfigError, RuntimeOptions
from inferpool.engine.plan.threads import cgroup_cpu_limit, plan_threads


def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None


def test_automatic_pool_fills_the_usable_cpus():
    assert plan_threads(RuntimeOptions(), cpus=4).runtimes == 4
    assert plan_threads(RuntimeOptions(intra_op_threads=2), cpus=4).runtimes == 2
    with pytest.raises(ConfigError, match="lower num_runtimes or intra_op_threads"):
        plan_threads(RuntimeOptions(intra_op_threads=8), cpus=4)


def test_oversubscription_is_refused_with_a_fix():
    with pytest.raises(ConfigError, match=r"num_runtimes=4 x intra_op_threads=1 = 4 threads.*lower num_runtimes"):
        plan_threads(RuntimeOptions(num_runtimes=4), cpus=2)


def test_oversubscription_can_be_allowed_explicitly(caplog):
    plan = plan_threads(RuntimeOptions(num_runtimes=4, oversubscribe=True), cpus=2)
    assert plan.threads == 4
    assert "running oversubscribed" in caplog.text
