"""A queue that takes turns between attempts: the node's uploads are one thread's work, and
one attempt's many or large files must not hold back another's (its model, its last
checkpoint before a requeue). Each attempt has its own line; `get` serves the lines in turn,
one item each, in the order attempts first came."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class FairQueue(Generic[Item]):
    def __init__(self) -> None:
        self._lines: OrderedDict[Hashable, deque[Item]] = OrderedDict()
        self._ready = threading.Condition()
        self._closed = False

    def put(self, owner: Hashable, item: Item) -> None:
        with self._ready:
            self._lines.setdefault(owner, deque()).append(item)
            self._ready.notify()

    def close(self) -> None:
        """`get` answers None once every line is empty."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def get(self) -> Item | None:
        with self._ready:
            while not self._lines:
                if self._closed:
                    return None
                self._ready.wait()
            owner, line = next(iter(self._lines.items()))
            item = line.popleft()
            del self._lines[owner]
            if line:  # to the back: the other attempts go first
                self._lines[owner] = line
            return item
