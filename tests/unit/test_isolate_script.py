"""docker/isolate-script.py: the `rig` console script runs Python isolated, and its RECORD still matches."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

SCRIPT = REPO / "docker/isolate-script.py"
CONSOLE = "#!/opt/venv/bin/python\nimport sys\nfrom rig.cli import main\nsys.exit(main())\n"


def _record_entry(data: bytes) -> str:
    return (
        "sha256="
        + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        + f",{len(data)}"
    )


def test_the_script_gets_minus_i_and_its_record_line_follows(tmp_path: Path) -> None:
    rig = tmp_path / "bin/rig"
    rig.parent.mkdir()
    rig.write_text(CONSOLE)
    record = tmp_path / "RECORD"
    record.write_text(
        f"../../../bin/rig,{_record_entry(CONSOLE.encode())}\nrig/cli.py,sha256=x,1\nRECORD,,\n"
    )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(rig), str(record)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert rig.read_text().splitlines()[0] == "#!/opt/venv/bin/python -I"
    assert record.read_text().splitlines() == [
        f"../../../bin/rig,{_record_entry(rig.read_bytes())}",
        "rig/cli.py,sha256=x,1",
        "RECORD,,",
    ]
    again = subprocess.run(
        [sys.executable, str(SCRIPT), str(rig), str(record)], capture_output=True, text=True
    )
    assert again.returncode == 1 and "expected a `#!.../python` first line" in again.stderr  # never twice
