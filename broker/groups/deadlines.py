"""Deadlines by key in a heap: schedule, reschedule or cancel one in O(log n), pop the due ones.

Rescheduling or cancelling a key leaves its old heap entry behind; an entry is skipped when
it surfaces if it is no longer the key's current one (lazy invalidation). A wake-up thus
costs O(log n) per due or stale entry instead of a scan of every deadline, and the heap is
rebuilt from the live entries once stale ones outnumber them, so its size stays within a
constant factor of the number of keys.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Rebuild when the heap holds more than this many entries beyond twice the live ones.
STALE_ENTRIES_SLACK = 64


def _nothing() -> None:
    pass


class DeadlineHeap(Generic[K]):
    """The current deadline (ms) of each key, earliest first.

    `on_earlier` is called when a deadline is scheduled before every deadline already in
    the heap: a timer sleeping until `earliest()` must look again."""

    def __init__(self, on_earlier: Callable[[], None] = _nothing) -> None:
        self._on_earlier = on_earlier
        self._heap: list[tuple[float, int, K]] = []
        self._current: dict[K, tuple[float, int, K]] = {}
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, key: K) -> bool:
        return key in self._current

    def deadline(self, key: K) -> float | None:
        entry = self._current.get(key)
        return None if entry is None else entry[0]

    def schedule(self, key: K, deadline_ms: float) -> None:
        """Set `key`'s deadline, replacing the one it had."""
        current = self._current.get(key)
        if current is not None and current[0] == deadline_ms:
            return
        entry = (deadline_ms, next(self._sequence), key)
        earlier = not self._heap or deadline_ms < self._heap[0][0]
        self._current[key] = entry
        heapq.heappush(self._heap, entry)
        self._compact()
        if earlier:
            self._on_earlier()

    def cancel(self, key: K) -> None:
        if self._current.pop(key, None) is not None:
            self._compact()

    def earliest(self) -> float | None:
        """The earliest current deadline; None when there is none."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: float) -> list[K]:
        """Remove and return the keys whose deadline is at or before `now_ms`, earliest
        first."""
        due: list[K] = []
        while True:
            self._drop_stale_top()
            if not self._heap or self._heap[0][0] > now_ms:
                return due
            _, _, key = heapq.heappop(self._heap)
            del self._current[key]
            due.append(key)

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap and self._current.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._current) + STALE_ENTRIES_SLACK:
            self._heap = list(self._current.values())
            heapq.heapify(self._heap)
