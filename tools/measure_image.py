"""Image size report: total, per layer, and the largest Python packages (markdown on stdout).

Usage: python3 tools/measure_image.py [IMAGE]   (default yolo-rig:cu121)
"""

import json
import subprocess
import sys


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def main(image: str) -> None:
    size = int(run("docker", "image", "inspect", "-f", "{{.Size}}", image))
    print(f"## Image size: {image}\n\nTotal: **{size / 1e9:.2f} GB** ({size} bytes)\n")
    print("| layer size | created by |\n|---:|---|")
    for line in run("docker", "history", "--no-trunc", "--format", "{{json .}}", image).splitlines():
        entry = json.loads(line)
        if entry["Size"] not in ("0B", "0"):
            created = entry["CreatedBy"].replace("|", "\\|").replace("/bin/bash -o pipefail -c ", "")
            print(f"| {entry['Size']} | `{created[:110]}` |")
    script = (
        "cd /opt/venv/lib/python3.11/site-packages && du -s --block-size=1M -- */ | sort -rn | head -15; "
        "echo; du -s --block-size=1M /opt/venv"
    )
    out = run("docker", "run", "--rm", "--network", "none", image, "bash", "-c", script)
    print("\n| MB | largest packages in /opt/venv |\n|---:|---|")
    for line in out.strip().splitlines():
        if line.strip():
            mb, path = line.split(maxsplit=1)
            print(f"| {mb} | `{path.rstrip('/')}` |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "yolo-rig:cu121")
