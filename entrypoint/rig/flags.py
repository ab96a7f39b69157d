"""On/off switches in the environment, read the same way everywhere: unset means on."""

from collections.abc import Mapping

OFF = frozenset({"0", "false", "no", "off"})


def switched_on(environ: Mapping[str, str], name: str) -> bool:
    """False only when the variable says off (0, false, no, off; any case, spaces ignored)."""
    return environ.get(name, "").strip().lower() not in OFF
