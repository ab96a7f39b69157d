"""The check at start: the Ultralytics this process imports, against rig's contract and its tested
window, before any data is read (`rig train`, `rig bench`, `rig plan`, and each rank).

- Older than the window, or lacking a name rig cannot train without (contract.CORE): one ERROR
  line naming the version, where it is imported from and the window; exit 2, nothing started.
- Newer than the window: one WARNING that it is untested; every feature whose names check out stays.
- A feature whose names are missing turns itself off: one WARNING naming it, the first missing
  name and the version; no line claims it afterwards (the trainer asks `feature_on`).
The report comes from rig.yolo.contractcheck (the image's own Ultralytics: a baked report).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rig import log, origins
from rig.errors import RigError
from rig.yolo import contract, contractcheck, ultra

_logger = log.get("ultralytics-check")  # not "ultralytics": that is Ultralytics' own logger
EXIT_CODE = 2
DISTRIBUTION = "yolo-rig"
PINNED = "ultralytics-opencv-headless"


def _key(version: str) -> tuple[int, ...]:
    """A release's number for ordering: 8.4.158 -> (8, 4, 158); a suffix (rc1, .dev0) is ignored."""
    parts = re.findall(r"\d+", version.split("+")[0])[:3]
    return tuple(int(p) for p in parts)


@functools.cache
def pinned() -> str:
    """The Ultralytics the image pins (rig's own requirement, pyproject.toml's), "" where unknown."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
        pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
        if pyproject.is_file():
            requires = re.findall(r'"([^"]+)"', pyproject.read_text())
    for requirement in requires:
        m = re.match(rf"{re.escape(PINNED)}\s*==\s*([\w.]+)", requirement.strip())
        if m:
            return m.group(1)
    return ""


@dataclass(frozen=True)
class Verdict:
    error: str | None = None  # the one ERROR line: rig cannot train with this Ultralytics
    warnings: list[str] = field(default_factory=list)


def window(newest: str) -> str:
    return contract.WINDOW.describe(newest or "the image's")


def decide(report: contractcheck.Report, newest: str, oldest: str = contract.WINDOW.oldest) -> Verdict:
    """What rig does with this Ultralytics (pure): refuse it, or the WARNINGs it starts with."""
    where = f"Ultralytics {report.version or '(no version)'} (imported from {report.location})"
    tested = f"rig is tested with Ultralytics {window(newest)}"
    fix = (
        f"use the image's Ultralytics {newest} (remove yours: `pip uninstall ultralytics`)"
        if newest
        else "install a release in that window"
    )
    if report.version and _key(report.version) < _key(oldest):
        return Verdict(error=f"{where} is older than rig supports: {tested}; {fix}")
    core = report.first_missing(contract.CORE)
    if core is not None:
        return Verdict(
            error=f"{where} lacks {core.describe()}, which rig cannot train without: {tested}; {fix}"
        )
    warnings = []
    if newest and report.version and _key(report.version) > _key(newest):
        warnings.append(f"{where} is newer than rig's tested window ({window(newest)}): untested")
    for feature in report.off():
        missing = report.first_missing(feature)
        assert missing is not None
        warnings.append(f"{feature.title} off: {where} lacks {missing.describe()}; {feature.off}")
    return Verdict(warnings=warnings)


def report_for(found: origins.Origin | None) -> contractcheck.Report:
    """The contract checked against an Ultralytics a session imports; without one, a report whose
    CORE is missing, which `check_at_start` turns into its ERROR line."""
    if found is None:
        missing = contractcheck.Missing(contract.CORE.key, "ultralytics", "not installed")
        return contractcheck.Report("", "nowhere", (missing,))
    return contractcheck.installed_report(Path(found.path))


@functools.cache
def installed() -> contractcheck.Report:
    """The Ultralytics this user's training imports, checked (once per process): rig itself runs
    isolated and imports the image's, while the ranks (and sessions) import a user's own from
    ~/.local ahead of it (rig.origins)."""
    return report_for(origins.find(ultra.PACKAGE, origins.session_path(os.environ, sys.path)))


def turned_off(found: origins.Origin) -> list[str]:
    """What rig does not run with an Ultralytics a session imports: its ERROR line, or one line per
    feature its names leave off (`rig doctor`)."""
    verdict = decide(report_for(found), pinned())
    return [verdict.error] if verdict.error is not None else verdict.warnings


def feature_on(feature: contract.Feature) -> bool:
    """Whether the installed Ultralytics has every name `feature` needs."""
    return installed().feature_on(feature)


def check_at_start(
    command: str,
    report: Callable[[], contractcheck.Report] | None = None,
    newest: Callable[[], str] | None = None,
    needs: contract.Feature | None = None,
) -> contractcheck.Report:
    """The check `command` runs first: its WARNINGs logged, its ERROR raised (exit 2); `needs`: a
    feature the command is (`rig bench`), whose names missing are its ERROR too."""
    checked = (report or installed)()
    top = (newest or pinned)()
    verdict = decide(checked, top)
    if verdict.error is None and needs is not None and (missing := checked.first_missing(needs)):
        where = f"Ultralytics {checked.version} (imported from {checked.location})"
        verdict = Verdict(error=f"{where} lacks {missing.describe()}; rig is tested with {window(top)}")
    if verdict.error is not None:
        raise RigError(f"{command}: {verdict.error}", EXIT_CODE)
    for line in verdict.warnings:
        _logger.warning("%s", line)
    return checked
