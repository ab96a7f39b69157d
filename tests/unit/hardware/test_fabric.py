"""The fabric between nodes, read from fake roots: which transport NCCL takes, over what, and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.hardware import fabric

from tests.helpers.fakesys import fabric_tree


@pytest.mark.parametrize(
    ("tree", "environ", "rdma", "words"),
    [
        ({"rdma": ("mlx5_0", "mlx5_1"), "uverbs": 2}, {}, True, "mlx5_0, mlx5_1 through uverbs0, uverbs1"),
        ({}, {}, False, "no InfiniBand/RoCE device in /sys/class/infiniband"),
        # sysfs shows the host's devices; only /dev/infiniband says they were passed in
        ({"rdma": ("mlx5_0",)}, {}, False, "the host has mlx5_0 but /dev/infiniband is not in the container"),
        ({"rdma": ("mlx5_0",), "uverbs": 1, "library": False}, {}, False, "no libibverbs.so.1 in the"),
        ({"rdma": ("mlx5_0",), "uverbs": 1}, {"NCCL_IB_DISABLE": "1"}, False, "NCCL_IB_DISABLE=1 turns"),
        ({"rdma": ("mlx5_0",), "uverbs": 1}, {"NCCL_NET": "Socket"}, False, "NCCL_NET=Socket turns"),
        ({"rdma": ("mlx5_0",), "uverbs": 1}, {"NCCL_IB_DISABLE": "0"}, True, "mlx5_0 through uverbs0"),
    ],
)
def test_the_transport_and_why(
    tmp_path: Path, tree: dict[str, object], environ: dict[str, str], rdma: bool, words: str
) -> None:
    found = fabric.read_fabric(fabric_tree(tmp_path, **tree), environ)  # type: ignore[arg-type]
    carried = fabric.transport(found)
    assert carried.rdma is rdma
    assert words in carried.why
    assert carried.line().startswith(
        "fabric: NCCL between nodes over " + ("InfiniBand/RoCE" if rdma else "TCP sockets")
    )
    if "/dev/infiniband is not" in words:
        assert "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1" in carried.why


@pytest.mark.parametrize(
    ("routes", "environ", "words"),
    [
        (("docker0", "eth0", "ib0"), {}, "NCCL picks ib0 (NCCL_SOCKET_IFNAME unset)"),  # ib* first
        (("docker0", "enp1s0", "eth1"), {}, "NCCL picks enp1s0 (NCCL_SOCKET_IFNAME unset)"),  # ifindex order
        (("docker0",), {}, "NCCL finds no routed interface (set NCCL_SOCKET_IFNAME)"),
        (("eth0",), {"NCCL_SOCKET_IFNAME": "bond0"}, "NCCL_SOCKET_IFNAME=bond0"),
        (("eth0",), {}, "gloo uses the address the host name resolves to (GLOO_SOCKET_IFNAME unset)"),
        (("eth0",), {"GLOO_SOCKET_IFNAME": "eth0"}, "GLOO_SOCKET_IFNAME=eth0"),
    ],
)
def test_the_socket_interfaces_as_set_or_as_nccl_picks_them(
    tmp_path: Path, routes: tuple[str, ...], environ: dict[str, str], words: str
) -> None:
    found = fabric.read_fabric(fabric_tree(tmp_path, routes=routes), environ)
    assert words in fabric.transport(found).line()
    if "GLOO" in words:
        assert words in fabric.gloo_line(found) and "NCCL" not in fabric.gloo_line(found)


def test_an_empty_root_reads_as_no_fabric(tmp_path: Path) -> None:
    found = fabric.read_fabric(tmp_path, {})
    assert found == fabric.Fabric((), (), False, (), None, None, None)
    assert not fabric.transport(found).rdma
