"""The train loader's batches as Ultralytics' loop enumerates them: a resumed epoch's from its
first batch not yet trained, each batch's index recorded before the loop sees it."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class Batches:
    """Ultralytics' loop's `enumerate` for the train loader. `offset`: the coming epoch's first batch
    (a resumed epoch's), used once; `current`: the index of the batch under way; `finished`: called
    when the loader is exhausted (a resumed epoch with no batch left: its validation is next)."""

    def __init__(self, finished: Callable[[], None]) -> None:
        self.offset = 0
        self.current = -1
        self.finished = finished

    def enumerate(self, loader: Iterable[Any], start: int = 0) -> Iterator[tuple[int, Any]]:
        offset, self.offset = self.offset, 0
        for i, batch in builtins.enumerate(loader, start + offset):
            self.current = i
            yield i, batch
        self.finished()


Numbered = Callable[..., Iterator[tuple[int, Any]]]


def enumerate_for(train_loader: Callable[[], Any], batches: Batches) -> Numbered:
    """An `enumerate` for Ultralytics' loop: `batches` for the train loader, the builtin for the rest."""

    def numbered(iterable: Iterable[Any], start: int = 0) -> Iterator[tuple[int, Any]]:
        if iterable is not train_loader():
            return builtins.enumerate(iterable, start)
        return batches.enumerate(iterable, start)

    return numbered
