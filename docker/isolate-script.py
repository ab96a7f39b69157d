"""Make an installed console script run Python in isolated mode: `#!/opt/venv/bin/python -I`.

Usage: isolate-script.py SCRIPT RECORD. The installer writes `#!PYTHON` alone, so `rig` as root
(the image's entrypoint, `docker exec ... rig`) would import a package or a `sitecustomize` from
PYTHONPATH or the user's site first; `-I` leaves out PYTHONPATH, every PYTHON* variable, the user's
site and the script's folder. The wheel's RECORD gets the script's new hash and size, so the
installed files still match it. Fails (exit 1) unless the script starts with a plain `#!...python`.
"""

import base64
import hashlib
import sys
from pathlib import Path


def main(script: Path, record: Path) -> int:
    data = script.read_bytes()
    first, sep, rest = data.partition(b"\n")
    if not first.startswith(b"#!/") or not first.endswith(b"/python"):
        print(f"ERROR {script}: expected a `#!.../python` first line, found {first!r}", file=sys.stderr)
        return 1
    data = first + b" -I" + sep + rest
    script.write_bytes(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = record.read_text().splitlines()
    suffix = f"/bin/{script.name}"
    found = [i for i, line in enumerate(lines) if line.split(",", 1)[0].endswith(suffix)]
    if len(found) != 1:
        print(f"ERROR {record}: expected one line for {suffix}, found {len(found)}", file=sys.stderr)
        return 1
    name = lines[found[0]].split(",", 1)[0]
    lines[found[0]] = f"{name},sha256={digest},{len(data)}"
    record.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
