"""A set of ids that remembers only the most recent ones."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["RecentIds"]


class RecentIds:
    """A set of ids that forgets the oldest once it holds more than ``size``: what a
    long-lived worker-side object remembers about jobs or calls (abandoned, ended) without
    growing with every one of a long run. Membership tests are single dict lookups, safe from
    another thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: OrderedDict[Hashable, None] = OrderedDict()

    def add(self, key: Hashable) -> None:
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        self._ids.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._ids)
