"""The delivery index of a share-partition on a priority topic: which record a fetch
acquires next.

A record's priority is its `priority` header (an ASCII decimal integer, lower is sooner;
absent or unparsable: the topic's default priority); a record with a `deliver-at-ms` header
(epoch milliseconds) is not acquirable before that time. The index holds one key per
record not known to be done, `priority * 2**64 + offset`, in a heap of records that may be
acquired and a heap of records still delayed; it is built by reading the log once (from the
share-partition's start offset when it is loaded, then the batches appended since), so a
fetch costs the records it takes, not the backlog. Entries are checked against the
share-partition's states when taken (acknowledged or archived ones are dropped then), and
records that leave ACQUIRED for AVAILABLE return to the heap. Pure, given the time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from raftka.broker.share.partition import RecordState, SharePartition

PRIORITY_HEADER = b"priority"
DELIVER_AT_HEADER = b"deliver-at-ms"
HEADER_NAMES = (PRIORITY_HEADER, DELIVER_AT_HEADER)
_OFFSETS = 1 << 64
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def parse_long(raw: bytes | None) -> int | None:
    """An ASCII decimal integer header value (optional sign, surrounding blanks allowed)
    within a signed 64-bit range, else None."""
    if raw is None or len(raw) > 32:
        return None
    try:
        value = int(raw.decode("ascii").strip(), 10)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if _LONG_MIN <= value <= _LONG_MAX else None


def priority_of(key: int) -> int:
    return key // _OFFSETS


def offset_of(key: int) -> int:
    return key % _OFFSETS


@dataclass(frozen=True, slots=True)
class IndexedOrder:
    """What a share-partition's index orders by: priority headers (else every record has
    `default_priority`, so offsets alone order them, delays still honoured)."""

    by_priority: bool
    default_priority: int = 0


class DeliveryIndex:
    def __init__(self, order: IndexedOrder, scanned_to: int) -> None:
        self.order = order
        #: The offset the log is read from next: records below it are indexed.
        self.scanned_to = scanned_to
        self._ready: list[int] = []
        self._delayed: list[tuple[int, int]] = []  # (deliver at, key)
        self._acquired: dict[int, int] = {}  # offset -> key, for the records acquired

    def add(
        self,
        records: Iterable[tuple[int, tuple[bytes | None, ...]]],
        next_offset: int,
        state: SharePartition | None = None,
    ) -> None:
        """Index the records read from the log (offset, (priority, deliver-at-ms) header
        values), which end just before `next_offset`; with `state`, those it holds as done
        (a share-partition reloaded after a restart) are left out."""
        default = self.order.default_priority
        by_priority = self.order.by_priority
        known = -1 if state is None else state.next_offset
        for offset, (raw_priority, raw_deliver_at) in records:
            if offset < self.scanned_to:
                continue
            if offset < known and state is not None and not state.is_available(offset):
                continue
            priority = parse_long(raw_priority) if by_priority else None
            key = (default if priority is None else priority) * _OFFSETS + offset
            deliver_at = parse_long(raw_deliver_at)
            if deliver_at is None:
                heapq.heappush(self._ready, key)
            else:
                heapq.heappush(self._delayed, (deliver_at, key))
        self.scanned_to = max(self.scanned_to, next_offset)

    def settle(self, state: SharePartition) -> None:
        """Take in what left ACQUIRED since the last call: records available again return
        to the heap, done ones are forgotten."""
        left = state.left_acquired
        if not left:
            return
        for first, last, new_state in left:
            for offset in range(first, last + 1):
                key = self._acquired.pop(offset, None)
                if key is not None and new_state == RecordState.AVAILABLE:
                    heapq.heappush(self._ready, key)
        left.clear()

    def _promote(self, now_wall_ms: int) -> None:
        delayed = self._delayed
        while delayed and delayed[0][0] <= now_wall_ms:
            heapq.heappush(self._ready, heapq.heappop(delayed)[1])

    def next_due_ms(self) -> int | None:
        """The wall time the earliest delayed record becomes acquirable, None without one."""
        return self._delayed[0][0] if self._delayed else None

    def take(self, state: SharePartition, now_wall_ms: int, max_records: int) -> list[int]:
        """Up to `max_records` keys of acquirable records, lowest first (priority, then
        offset), removed from the index: the caller acquires them (`acquired`) or gives
        them back (`give_back`)."""
        self.settle(state)
        self._promote(now_wall_ms)
        taken: list[int] = []
        ready = self._ready
        while ready and len(taken) < max_records:
            key = heapq.heappop(ready)
            offset = key % _OFFSETS
            if offset in self._acquired or not state.is_available(offset):
                continue  # done, or acquired: it comes back if it is released
            taken.append(key)
        return taken

    def give_back(self, keys: Iterable[int]) -> None:
        for key in keys:
            heapq.heappush(self._ready, key)

    def acquired(self, keys: Iterable[int]) -> None:
        for key in keys:
            self._acquired[key % _OFFSETS] = key

    def in_flight(self) -> int:
        """Records acquired through this index and not yet settled."""
        return len(self._acquired)

    def counts(self) -> tuple[int, int]:
        """(entries that may be acquirable, entries still delayed): upper bounds, as done
        records are dropped only when reached."""
        return len(self._ready), len(self._delayed)


def runs_of(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending offsets as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs
