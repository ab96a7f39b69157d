#!/usr/bin/env python3
"""Merge our overlay into the pinned Ultralytics' packaged cfg/default.yaml, at build time.

Each overlay key must already exist upstream (a renamed or removed key fails the build instead of
silently doing nothing). The upstream line is rewritten in place, keeping the file's layout and
noting the old value; the upstream values are recorded so `rig bench` can measure stock too.

usage: merge-ultralytics-cfg.py OVERLAY DEFAULT_YAML RECORD_YAML
"""

import re
import sys
from pathlib import Path

import yaml


def merge(overlay_path: Path, default_path: Path, record_path: Path) -> list[str]:
    overlay = yaml.safe_load(overlay_path.read_text()) or {}
    text = default_path.read_text()
    upstream = yaml.safe_load(text)
    if not isinstance(overlay, dict):
        raise SystemExit(f"ERROR merge-ultralytics-cfg: {overlay_path} must be a mapping of key: value")
    unknown = sorted(set(overlay) - set(upstream))
    if unknown:
        raise SystemExit(
            f"ERROR merge-ultralytics-cfg: {overlay_path} sets {', '.join(unknown)}, which the pinned "
            f"Ultralytics ({default_path}) does not have; remove or rename them"
        )
    lines = text.splitlines(keepends=True)
    changed = []
    for key, value in overlay.items():
        pattern = re.compile(rf"^{re.escape(key)}:[^#\n]*(#.*)?$")
        hits = [i for i, line in enumerate(lines) if pattern.match(line.rstrip("\n"))]
        if len(hits) != 1:
            raise SystemExit(
                f"ERROR merge-ultralytics-cfg: expected one top-level '{key}:' line, found {len(hits)}"
            )
        rendered = yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip().strip("{}")
        old = upstream[key]
        lines[hits[0]] = f"{rendered} # yolo-rig (upstream: {old!r}, see /opt/rig/configs/ultralytics.yaml)\n"
        changed.append(f"{key}: {old!r} -> {value!r}")
    merged_text = "".join(lines)
    merged = yaml.safe_load(merged_text)
    expected = {**upstream, **overlay}
    if merged != expected:  # the line edit must change exactly the overlay's keys
        diff = sorted(k for k in expected if merged.get(k) != expected[k])
        raise SystemExit(f"ERROR merge-ultralytics-cfg: merged file differs from the intent at {diff}")
    default_path.write_text(merged_text)
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(
        "# The pinned Ultralytics' own values for the keys yolo-rig changes (written at build time).\n"
        + yaml.safe_dump({k: upstream[k] for k in overlay}, sort_keys=False)
    )
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    for change in merge(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])):
        print(f"INFO merge-ultralytics-cfg: {change}")
