"""Which GPUs a run uses: one decision for rig train, rig plan, rig doctor and rig bench."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.errors import RigError
from rig.hardware import choice
from rig.hardware.topology import read_topology

from tests.helpers.fakesys import FakeSys


@pytest.mark.parametrize(
    ("spec", "visible", "used"),
    [
        (None, 4, [0, 1, 2, 3]),
        ("all", 2, [0, 1]),
        ("2", 4, [0, 1]),
        ("3,0", 4, [3, 0]),  # rank order is the order given
        ("1,5", 4, [1]),  # what there is of it: the doctor reports the rest
        ("6", 4, [0, 1, 2, 3]),
        ("all", 0, []),
    ],
)
def test_usable_gpus(spec: str | None, visible: int, used: list[int]) -> None:
    assert choice.usable_gpus(choice.parse_gpus(spec), visible) == used


def test_select_gpus_is_usable_gpus_or_one_line(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path).node(0, "0-7")
    for i in range(4):
        fs.gpu(f"0000:{0x17 + i:02x}:00.0", 0, "0-7")
    topo = read_topology(tmp_path)
    for spec in (None, "2", "3,0", "3,"):
        asked = choice.parse_gpus(spec)
        assert choice.select_gpus(asked, topo) == choice.usable_gpus(asked, len(topo.gpus))
    with pytest.raises(RigError, match=r"^--gpus 6: only 4 GPU\(s\) are visible"):
        choice.select_gpus(choice.parse_gpus("6"), topo)
    with pytest.raises(RigError, match=r"^GPU id 5 is not visible; the visible GPUs are 0=0000:17:00.0"):
        choice.select_gpus(choice.parse_gpus("1,5"), topo)
    with pytest.raises(RigError, match=r"^no GPU is visible in this container"):
        choice.select_gpus("all", read_topology(tmp_path / "empty"))
