"""The binding plan: which GPU, CPUs and memory node each local rank gets. Pure functions only.

Ranks are bound to the CPUs of their GPU's NUMA node, so data loader workers (which inherit the
rank's affinity) copy batches over the local memory controller and PCIe root instead of across the
socket interconnect. Ranks that share a node get disjoint, equal shares of whole physical cores.
Memory is *preferred* on the node, never strict: a large `cache=ram` spills over instead of OOMing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rig.hardware.topology import Topology, format_cpulist


@dataclass(frozen=True)
class RankBinding:
    local_rank: int
    gpu_bus_id: str | None  # None for a CPU-only rank
    numa_node: int  # -1: unknown
    cpus: tuple[int, ...]
    mem_node: int | None  # preferred memory node; None leaves the kernel's default policy
    # The GPU's CUDA ordinal as this container numbers them (the --gpus number); None: CPU rank.
    gpu_index: int | None = None


@dataclass(frozen=True)
class Plan:
    ranks: tuple[RankBinding, ...]
    warnings: tuple[str, ...] = ()


def _split(units: Sequence[frozenset[int]], k: int) -> list[tuple[int, ...]] | None:
    """k disjoint, equal shares of whole units (cores), in order; None when there are fewer than k."""
    share = len(units) // k
    if share == 0:
        return None
    return [tuple(sorted(set().union(*units[i * share : (i + 1) * share]))) for i in range(k)]


def _units(topology: Topology, cpus: frozenset[int]) -> list[frozenset[int]]:
    """Whole physical cores inside cpus, or single CPUs when sibling data is missing."""
    cores = [c & cpus for c in topology.cores if c & cpus]
    covered = frozenset().union(*cores) if cores else frozenset()
    cores += [frozenset({c}) for c in sorted(cpus - covered)]
    return sorted(cores, key=min)


def _share(topology: Topology, cpus: frozenset[int], k: int) -> list[tuple[int, ...]] | None:
    """Split by cores; if there are fewer cores than ranks, by hardware threads."""
    by_core = _split(_units(topology, cpus), k)
    return by_core if by_core is not None else _split([frozenset({c}) for c in sorted(cpus)], k)


def make_plan(topology: Topology, nranks: int, gpu_indices: Sequence[int] | None = None) -> Plan:
    """Bind nranks local ranks to the GPUs gpu_indices (default: the first nranks GPUs)."""
    if nranks < 1:
        raise ValueError("nranks must be at least 1")
    allowed = topology.allowed_cpus
    chosen: list[int | None]
    if not topology.gpus:
        gpus: list[tuple[str | None, int, frozenset[int]]] = [(None, -1, allowed)] * nranks
        chosen = [None] * nranks
    else:
        chosen = list(gpu_indices) if gpu_indices is not None else list(range(nranks))
        if len(chosen) != nranks:
            raise ValueError("one GPU per rank")
        by_index = {g.index: g for g in topology.gpus}
        gpus = [
            (by_index[i].bus_id, by_index[i].numa_node, by_index[i].local_cpus)
            for i in chosen
            if i is not None
        ]

    # Group ranks by the CPU set they draw from (their GPU's node), then share each set out.
    groups: dict[frozenset[int], list[int]] = {}
    for rank, (_, _, local) in enumerate(gpus):
        groups.setdefault(local & allowed, []).append(rank)

    cpus_of: dict[int, tuple[int, ...]] = {}
    starved = [r for members in groups.values() for r in members if not _group_ok(topology, groups, r)]
    warnings: list[str] = []
    if starved:
        names = ", ".join(f"{gpus[r][0] or 'rank ' + str(r)} (node {gpus[r][1]})" for r in starved)
        warnings.append(
            f"the container's CPUs ({format_cpulist(allowed)}) do not cover the NUMA node of GPU {names}; "
            "splitting the allowed CPUs evenly instead. Give the container CPUs on each GPU's node "
            "(docker --cpuset-cpus, compose `cpuset`) for local data loading"
        )
        even = _share(topology, allowed, nranks) or [tuple(sorted(allowed))] * nranks
        cpus_of = dict(enumerate(even))
    else:
        for pool, members in groups.items():
            shares = _share(topology, pool, len(members))
            assert shares is not None  # _group_ok checked it
            cpus_of.update(zip(members, shares, strict=True))

    ranks = tuple(
        RankBinding(
            local_rank=r,
            gpu_bus_id=bus,
            numa_node=node,
            cpus=cpus_of[r],
            mem_node=node if node >= 0 else None,
            gpu_index=chosen[r],
        )
        for r, (bus, node, _) in enumerate(gpus)
    )
    return Plan(ranks=ranks, warnings=tuple(warnings))


def cpu_plan(topology: Topology, nranks: int) -> Plan:
    """Bind nranks CPU ranks (device=cpu): the allowed CPUs shared out by NUMA node, then by core.

    With at least as many ranks as memory nodes, each node's CPUs go to a contiguous block of ranks
    (in proportion to its CPUs), whose memory is preferred there; with fewer ranks than nodes, each
    rank gets whole nodes and the kernel's memory policy.
    """
    if nranks < 1:
        raise ValueError("nranks must be at least 1")
    allowed = topology.allowed_cpus
    pools = [cpus & allowed for _, cpus in sorted(topology.node_cpus.items()) if cpus & allowed]
    node_ids = [n for n, cpus in sorted(topology.node_cpus.items()) if cpus & allowed]
    if not pools:
        pools, node_ids = [allowed], [-1]
    ranks: list[RankBinding] = []
    if nranks >= len(pools):
        counts = _apportion([len(p) for p in pools], nranks)
        for node, pool, count in zip(node_ids, pools, counts, strict=True):
            shares = _share(topology, pool, count) or [tuple(sorted(pool))] * count
            for cpus in shares:
                ranks.append(RankBinding(len(ranks), None, node, cpus, node if node >= 0 else None))
    else:
        per = len(pools) // nranks
        for r in range(nranks):
            mine = pools[r * per : (r + 1) * per if r < nranks - 1 else len(pools)]
            single = node_ids[r * per] if len(mine) == 1 else -1
            cpus = tuple(sorted(frozenset().union(*mine)))
            ranks.append(RankBinding(r, None, single, cpus, single if single >= 0 else None))
    return Plan(ranks=tuple(ranks))


def _apportion(sizes: Sequence[int], n: int) -> list[int]:
    """n ranks over pools of these sizes: at least one each, the rest by largest remainder."""
    counts = [1] * len(sizes)
    total = sum(sizes)
    extra = n - len(sizes)
    quotas = [extra * s / total for s in sizes]
    for i, q in enumerate(quotas):
        counts[i] += int(q)
    left = n - sum(counts)
    for i in sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))[:left]:
        counts[i] += 1
    return counts


def _group_ok(topology: Topology, groups: dict[frozenset[int], list[int]], rank: int) -> bool:
    for pool, members in groups.items():
        if rank in members:
            return _share(topology, pool, len(members)) is not None
    return False


def to_json(ranks: Sequence[RankBinding]) -> str:
    return json.dumps([{**asdict(r), "cpus": list(r.cpus)} for r in ranks])


def from_json(text: str) -> list[RankBinding]:
    return [
        RankBinding(
            local_rank=int(d["local_rank"]),
            gpu_bus_id=d["gpu_bus_id"],
            numa_node=int(d["numa_node"]),
            cpus=tuple(int(c) for c in d["cpus"]),
            mem_node=None if d["mem_node"] is None else int(d["mem_node"]),
            gpu_index=None if d.get("gpu_index") is None else int(d["gpu_index"]),
        )
        for d in json.loads(text)
    ]


def table(ranks: Sequence[RankBinding]) -> str:
    """The plan as the aligned table `rig plan` prints."""
    rows = [("rank", "gpu", "numa", "cpus", "mem")]
    for r in ranks:
        rows.append(
            (
                str(r.local_rank),
                r.gpu_bus_id or "cpu",
                str(r.numa_node),
                format_cpulist(r.cpus),
                "-" if r.mem_node is None else f"{r.mem_node} (preferred)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
