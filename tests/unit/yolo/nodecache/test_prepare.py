"""When the launcher prepares the data, and what an unusable node cache means on a node of several
ranks. The image tests (tests/image/test_ddp_faults.py) run both through real CPU ranks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rig.yolo.nodecache import cached_dataset, prepare


@pytest.mark.parametrize(
    ("args", "task", "world", "wanted"),
    [
        ({"data": "d.yaml"}, "detect", 2, True),
        ({"data": "d.yaml"}, "segment", 16, True),
        ({"data": "d.yaml"}, "detect", 1, False),  # one rank: nobody waits in a barrier
        ({"data": "d.yaml", "resume": "True"}, "detect", 2, False),  # the checkpoint's arguments rule
        ({"data": "d.yaml", "resume": "False"}, "detect", 2, True),
        ({"data": "d.yaml"}, "classify", 2, False),  # no build_yolo_dataset
        ({}, "detect", 2, False),
    ],
)
def test_the_launcher_prepares_for_several_ranks(
    args: dict[str, str], task: str, world: int, wanted: bool
) -> None:
    assert prepare.wanted(args, task, world) is wanted


def test_an_unusable_node_cache_is_cache_off_on_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    ds = SimpleNamespace(cache="ram")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert cached_dataset._without_node_cache(ds, "no room", lambda: calls.append("own") or True) is False
    assert ds.cache is None and calls == []  # never Ultralytics' own cache=ram, a copy per rank
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    ds = SimpleNamespace(cache="ram")
    assert cached_dataset._without_node_cache(ds, "no room", lambda: calls.append("own") or True) is True
    assert ds.cache == "ram" and calls == ["own"]  # one rank: Ultralytics checks the RAM for its copy
    line = cached_dataset.unusable_warning("no room", 8)
    assert line.startswith("the node image cache cannot be used (no room): cache=False")
