"""The GPU environment: rig's defaults with their reasons, the user's values win; `rig env` prints them."""

from __future__ import annotations

import json

import pytest
from rig import cli
from rig.launch import gpuenv


def test_gpu_environment_keeps_user_values_and_says_why() -> None:
    entries = {e.name: e for e in gpuenv.gpu_environment({"NCCL_DEBUG": "INFO"}, threads=6)}
    assert entries["CUDA_DEVICE_ORDER"].value == "PCI_BUS_ID"
    assert entries["OMP_NUM_THREADS"].value == "6" and not entries["OMP_NUM_THREADS"].user_set
    assert entries["MKL_THREADING_LAYER"].value == "GNU"
    assert entries["PYTORCH_CUDA_ALLOC_CONF"].value == "expandable_segments:True"
    # torch's default (3: abort and skip clean-up) is the one that ends a stuck job; 1 would clean up.
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in entries
    assert entries["NCCL_DEBUG"].value == "INFO" and entries["NCCL_DEBUG"].user_set
    assert all(e.reason for e in entries.values())
    # What rig set once (e.g. in `rig exec`) it may resize later; what the user set it never touches.
    once = gpuenv.updated({"NCCL_DEBUG": "INFO"}, threads=16)
    again = gpuenv.updated(once, threads=4)
    assert again["OMP_NUM_THREADS"] == "4" and again["NCCL_DEBUG"] == "INFO"
    assert gpuenv.updated({"OMP_NUM_THREADS": "3"}, threads=4)["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize("name", gpuenv.ALLOC_CONF)
def test_the_allocator_setting_goes_under_both_names_with_the_users_value(name: str) -> None:
    # torch 2.9 reads PYTORCH_ALLOC_CONF first: the user's PYTORCH_CUDA_ALLOC_CONF must reach it too.
    assert {gpuenv.updated({})[n] for n in gpuenv.ALLOC_CONF} == {"expandable_segments:True"}
    env = gpuenv.updated({name: "max_split_size_mb:128"})
    assert {env[n] for n in gpuenv.ALLOC_CONF} == {"max_split_size_mb:128"}
    assert {n for n in gpuenv.ALLOC_CONF if n in env[gpuenv.MARKER].split(",")} == set(gpuenv.ALLOC_CONF) - {
        name
    }


def test_rig_env_prints_every_variable_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.delenv(gpuenv.MARKER, raising=False)
    assert cli.main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("NCCL_DEBUG=INFO") and "set by you" in line for line in lines)
    assert any(line.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID") and "rig default" in line for line in lines)
    assert cli.main(["env", "--json"]) == 0
    assert {e["name"] for e in json.loads(capsys.readouterr().out)} >= {
        "OMP_NUM_THREADS",
        "MKL_THREADING_LAYER",
    }
