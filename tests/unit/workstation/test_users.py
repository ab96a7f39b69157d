"""User yolo's ids: what RIG_UID/RIG_GID ask for, what /etc/passwd says."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import users

CURRENT = users.Ids(1000, 1000)


# ---- users -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, users.Ids(1000, 1000)),
        ({"RIG_UID": "1234"}, users.Ids(1234, 1234)),
        ({"RIG_UID": "1234", "RIG_GID": "100"}, users.Ids(1234, 100)),
        ({"RIG_GID": "100"}, users.Ids(1000, 100)),
        ({"RIG_UID": " 501 ", "RIG_GID": ""}, users.Ids(501, 501)),
    ],
)
def test_requested_ids(environ: dict[str, str], expected: users.Ids) -> None:
    assert users.requested_ids(environ, CURRENT) == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RIG_UID": "0"}, "RIG_UID=0 would run SSH logins, Jupyter and training as root"),
        ({"RIG_UID": "1000", "RIG_GID": "0"}, "RIG_GID=0 would run"),
        ({"RIG_UID": "bob"}, "RIG_UID='bob': use a whole number between 1 and 2147483646; your host id"),
        ({"RIG_UID": "-5"}, "RIG_UID='-5': use a whole number between 1 and 2147483646"),
        ({"RIG_UID": "1000", "RIG_GID": "x"}, "RIG_GID='x': use a whole number between 1 and 2147483646"),
    ],
)
def test_requested_ids_refuses(environ: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message.replace("(", r"\(")):
        users.requested_ids(environ, CURRENT)


def test_current_ids_reads_passwd(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0::/root:/bin/bash\nyolo:x:1234:99::/home/yolo:/bin/bash\n"
    )
    assert users.current_ids(tmp_path) == users.Ids(1234, 99)
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    with pytest.raises(RigError, match="missing"):
        users.current_ids(tmp_path)
