"""The container's CPUs, as the image cache's builder widens to them (cgroup v2, v1, the scheduler)."""

from __future__ import annotations

import os
from pathlib import Path

from rig.hardware import topology

from tests.helpers.fakesys import FakeSys


def test_container_cpus_come_from_the_cgroup_v2_cpuset(tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").node(0, "0-7").cpuset("2-3,6")
    assert topology.container_cpus(tmp_path) == {2, 3, 6}


def test_container_cpus_fall_back_to_cgroup_v1(tmp_path: Path) -> None:
    v1 = tmp_path / "sys/fs/cgroup/cpuset/cpuset.effective_cpus"
    v1.parent.mkdir(parents=True)
    v1.write_text("0,4-5\n")
    FakeSys(tmp_path / "sys").node(0, "0-7")
    assert topology.container_cpus(tmp_path) == {0, 4, 5}


def test_container_cpus_without_a_cgroup_are_the_schedulers(tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").node(0, "0-7").cpuset("")
    assert topology.container_cpus(tmp_path) == frozenset(os.sched_getaffinity(0))


def test_visible_device_lists_are_read_one_way() -> None:
    assert topology.visible_entries(" 3, GPU-ab ,,1 ") == ["3", "GPU-ab", "1"]
    assert topology.visible_entries("") == []
