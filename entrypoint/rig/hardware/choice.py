"""Which GPUs a run uses: `--gpus`/`GPUS=`/`device=` read once, and the GPUs they name among the
visible ones. Pure functions, shared by `rig train`, `rig launch`, `rig plan`, `rig doctor` and
`rig bench`, so they never disagree about a run's GPUs."""

from __future__ import annotations

from rig.errors import RigError
from rig.hardware.topology import Topology

# 'all', a count, or CUDA ordinals (the numbers in the container, after CUDA_VISIBLE_DEVICES).
Choice = str | list[int] | int

NO_GPU = (
    "no GPU is visible in this container: reserve GPUs for it (compose: deploy.resources.reservations."
    "devices with driver: nvidia, capabilities: [gpu]; docker run --gpus all) and install the NVIDIA "
    "container toolkit on the host (nvidia-ctk runtime configure --runtime=docker); or train on the "
    "CPU with device=cpu"
)
# Apptainer binds the host's /dev, so the GPUs' device files are there; the driver's libraries come
# only with --nv (or --nvccli).
NO_DRIVER = (
    "{n} GPU(s) are on this machine but this container has no NVIDIA driver libraries to use them: "
    "start it with `apptainer run --nv` (or `apptainer exec --nv`), or train on the CPU with device=cpu"
)


def parse_gpus(spec: str | None, option: str = "--gpus") -> Choice:
    """'all' -> 'all'; '2' -> 2 (a count); '0,2' or '3,' -> [0, 2] / [3] (CUDA ordinals).
    option=device: always ids ('3' is GPU 3). Errors carry the option (RigError.option): the CLI
    spells it as the user typed it."""
    if spec is None or spec.strip().lower() == "all":
        return "all"
    text = spec.strip()
    how = "use a count (2), all, or GPU ids (0,2)" if option == "--gpus" else "use GPU ids (0,2), all, or cpu"

    def bad(message: str) -> RigError:
        return RigError(message, option=option, value=spec)

    if "," in text or option != "--gpus":
        items = [x.strip() for x in text.split(",") if x.strip()]
        ids: list[int] = []
        for item in items:
            if not item.lstrip("-").isdigit():
                raise bad(f"GPU id {item!r} is not a number; {how}")
            if int(item) < 0:
                raise bad(f"GPU id {item} is negative; GPU ids start at 0")
            ids.append(int(item))
        if not ids:
            raise bad(f"names no GPU; {how}")
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise bad(f"names GPU {dupes[0]} twice; list each GPU once")
        return ids
    if not text.lstrip("-").isdigit():
        raise bad(f"not a number; {how}")
    count = int(text)
    if count <= 0:
        raise bad("at least one GPU is needed; train on the CPU with device=cpu instead")
    return count


def select_gpus(choice: Choice, topology: Topology) -> list[int]:
    """The GPUs a run uses for choice, in rank order; one line naming the visible GPUs when the
    choice asks for more than there are."""
    visible = len(topology.gpus)
    if visible == 0:
        raise RigError(NO_DRIVER.format(n=topology.without_driver) if topology.without_driver else NO_GPU)
    names = ", ".join(f"{g.index}={g.bus_id}" for g in topology.gpus)
    if isinstance(choice, int) and choice > visible:
        raise RigError(
            f"only {visible} GPU(s) are visible ({names}); use {visible} or fewer, or give the "
            "container more GPUs",
            option="--gpus",
            value=choice,
        )
    missing = [i for i in choice if i >= visible] if isinstance(choice, list) else []
    if missing:
        raise RigError(f"GPU id {missing[0]} is not visible; the visible GPUs are {names}")
    return usable_gpus(choice, visible)


def usable_gpus(choice: Choice, visible: int) -> list[int]:
    """The GPUs among `visible` that choice names, in rank order: every one for 'all', the first
    N for a count, the listed ids that exist. What the run would use; select_gpus refuses a shortfall."""
    if isinstance(choice, list):
        return [i for i in choice if i < visible]
    return list(range(visible if choice == "all" else min(int(choice), visible)))
