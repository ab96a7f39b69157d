"""rig.yolo.augment.building: the dataset wrappers entered in their one order, each with what the
caller decided. (That the classes compose in that order, and pickle by name to a spawned loader
worker, is checked in the image: tests/image/test_device_augment.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from rig.yolo import augment, draws, ultra
from rig.yolo.augment import dataset
from rig.yolo.nodecache import cached_dataset


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Each wrapper's in_use, recording (wrapper, its arguments) as it is entered and ("exit", wrapper)
    as it is left."""
    seen: list[tuple[str, Any]] = []

    def recording(name: str) -> Any:
        @contextlib.contextmanager
        def in_use(*args: Any) -> Iterator[None]:
            seen.append((name, args))
            yield
            seen.append(("exit", name))

        return in_use

    monkeypatch.setattr(cached_dataset, "in_use", recording("node cache"))
    monkeypatch.setattr(dataset, "in_use", recording("device augment"))
    monkeypatch.setattr(draws, "in_use", recording("seeded draws"))
    monkeypatch.setattr(ultra, "screened_files", recording("file screen"))
    return seen


def test_the_wrappers_go_on_in_their_one_order(entered: list[tuple[str, Any]]) -> None:
    cfg: Any = SimpleNamespace(cache="ram")
    env = {"RIG_DEVICE_AUGMENT": "1"}
    with augment.building(cfg, "train", exact=True, guards=True, environ=env, announce=False):
        entered.append(("build", None))
    assert entered == [
        ("node cache", (cfg,)),  # innermost: made over Ultralytics' own class
        ("device augment", ("train", env, False)),
        ("seeded draws", ("train", True)),  # outermost: seeds before any other __getitem__
        ("file screen", (True,)),
        ("build", None),
        ("exit", "file screen"),
        ("exit", "seeded draws"),
        ("exit", "device augment"),
        ("exit", "node cache"),
    ]


def test_what_the_caller_decided_reaches_each_wrapper(entered: list[tuple[str, Any]]) -> None:
    cfg: Any = SimpleNamespace(cache=False)
    with augment.building(cfg, "val", exact=False, guards=None):
        pass
    assert [e for e in entered if e[0] != "exit"] == [
        ("node cache", (cfg,)),
        ("device augment", ("val", None, True)),
        ("seeded draws", ("val", False)),
        ("file screen", (None,)),
    ]
