"""tools/lock_versions.py: each stack's versions, found in the one uv.lock that holds both."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.yolo import ultracheck

from tests.helpers import REPO
from tools import lock_versions


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        ("cu121", {"TORCH_VERSION": "2.3.1", "TORCHVISION_VERSION": "0.18.1", "CUDNN_VERSION": "8.9.2.26",
                   "CUDA_VERSION": "12.1"}),
        ("cu128", {"TORCH_VERSION": "2.9.1", "TORCHVISION_VERSION": "0.24.1", "CUDNN_VERSION": "9.10.2.21",
                   "CUDA_VERSION": "12.8"}),
    ],
)  # fmt: skip
def test_each_stack_reads_its_own_versions_from_the_lock(stack: str, expected: dict[str, str]) -> None:
    versions = lock_versions.stack_versions(REPO / "uv.lock", stack)
    pinned = ultracheck.pinned()  # pyproject.toml's pin, read apart from the lock
    assert pinned and versions == {**expected, "ULTRALYTICS_VERSION": pinned}


def test_the_locks_stacks_are_the_entrypoints_table() -> None:
    from rig import versions

    lock = lock_versions.tomllib.loads((REPO / "uv.lock").read_text())
    assert lock_versions.stacks(lock) == sorted(s.name for s in versions.STACKS)
    assert versions.DEFAULT_STACK == "cu121"
    for s in versions.STACKS:
        assert lock_versions.stack_versions(REPO / "uv.lock", s.name)["CUDA_VERSION"] == s.cuda


def test_an_unknown_stack_is_one_line_naming_the_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert lock_versions.main([str(REPO / "uv.lock"), "cu999"]) == 1
    assert (
        capsys.readouterr().err
        == "ERROR make: STACK=cu999 is not a stack in "
        + str(Path(REPO / "uv.lock"))
        + " (one of: cu121, cu128)\n"
    )
