"""The delivery index of a share-partition on a priority or fair topic (or a fifo topic
honouring delays): which record a fetch acquires next.

The index holds one entry per record not known to be done, `rank * 2**64 + offset`, where
the rank depends on the order: on a priority topic the record's priority (its `priority`
header, an ASCII decimal integer, lower is sooner; absent or unparsable: the topic's
default), on a fair topic the record's fairness group (a small number standing for its key,
or the value of the header `share.fair.key` names). Records that may be acquired wait in the
order's queue (`PriorityHeap`: lowest entry first; `FairRotation`: up to
`share.fair.records.per.turn` records per group per turn, round robin across the groups with
records, each group's in offset order); records with a `deliver-at-ms` header (epoch
milliseconds) wait in a heap by due time until then. The index is built by reading the log
once (from the share-partition's start offset when it is loaded, then the batches appended
since), so a fetch costs the records it takes, not the backlog. Entries are checked against
the share-partition's states when taken (acknowledged or archived ones are dropped then),
and records that leave ACQUIRED for AVAILABLE return to their queue (or, released with a
delay, to the delayed heap). A priority changed through the share-partition
(`SharePartition.priorities`) gives a record a new entry (`override`); its old one is
dropped when reached. Pure, given the time.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from raftka.broker.share.partition import RecordState, SharePartition

PRIORITY_HEADER = b"priority"
DELIVER_AT_HEADER = b"deliver-at-ms"
HEADER_NAMES = (PRIORITY_HEADER, DELIVER_AT_HEADER)
_OFFSETS = 1 << 64
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

#: A record as read from the log: (offset, the values of `IndexedOrder.header_names()`,
#: then its key when the order asks for it).
IndexedRecord = tuple[int, tuple[bytes | None, ...]]


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
    """The rank of an entry: its priority on a priority topic, its group on a fair one."""
    return key // _OFFSETS


def offset_of(key: int) -> int:
    return key % _OFFSETS


@dataclass(frozen=True, slots=True)
class FairKey:
    """What groups a fair topic's records: the header named `header`, else the record key."""

    header: bytes | None = None

    @classmethod
    def parse(cls, config: str) -> FairKey:
        """From the topic config `share.fair.key`: `key` or `header:NAME`."""
        prefix = "header:"
        return cls(config[len(prefix) :].encode()) if config.startswith(prefix) else cls()


@dataclass(frozen=True, slots=True)
class IndexedOrder:
    """What a share-partition's index orders by: priority headers, fairness groups (`fair`
    set), or neither (offsets alone order the records, delays still honoured)."""

    by_priority: bool
    default_priority: int = 0
    fair: FairKey | None = None
    #: On a fair topic, the records a fairness group may take per turn.
    per_turn: int = 1

    def header_names(self) -> tuple[bytes, ...]:
        """The headers to read of each record (the fairness header last when there is one)."""
        if self.fair is not None and self.fair.header is not None:
            return (*HEADER_NAMES, self.fair.header)
        return HEADER_NAMES

    @property
    def with_key(self) -> bool:
        """Whether each record's key is read too (after the headers)."""
        return self.fair is not None and self.fair.header is None


class ReadyQueue(Protocol):
    """The entries that may be acquired, in one order."""

    def rank(self, values: tuple[bytes | None, ...]) -> int:
        """The rank of a new record from its values (see `IndexedRecord`)."""
        ...

    def push(self, key: int) -> None: ...

    def take(self, max_records: int, live: Callable[[int], bool]) -> list[int]:
        """Up to `max_records` entries, next first, removed; entries not `live` are dropped
        (and forgotten) on the way."""
        ...

    def give_back(self, keys: list[int]) -> None:
        """The entries of the last `take` (a suffix of them, in the order taken) that were
        not acquired after all, back as if not taken."""
        ...

    def forget(self, key: int) -> None:
        """An entry leaves the index for good."""
        ...

    def __len__(self) -> int: ...


class PriorityHeap:
    """Lowest entry first: by priority, then offset (or offset alone without priorities)."""

    def __init__(self, order: IndexedOrder) -> None:
        self._by_priority = order.by_priority
        self._default = order.default_priority
        self._heap: list[int] = []

    def rank(self, values: tuple[bytes | None, ...]) -> int:
        priority = parse_long(values[0]) if self._by_priority else None
        return self._default if priority is None else priority

    def push(self, key: int) -> None:
        heapq.heappush(self._heap, key)

    def take(self, max_records: int, live: Callable[[int], bool]) -> list[int]:
        taken: list[int] = []
        heap = self._heap
        while heap and len(taken) < max_records:
            key = heapq.heappop(heap)
            # A record given its priority back has its entry twice: equal keys are
            # popped one after the other.
            if live(key) and (not taken or taken[-1] != key):
                taken.append(key)
        return taken

    def give_back(self, keys: list[int]) -> None:
        for key in keys:
            heapq.heappush(self._heap, key)

    def forget(self, key: int) -> None:
        return None

    def __len__(self) -> int:
        return len(self._heap)


class FairRotation:
    """Round robin across fairness groups with ready records, up to `per_turn` records per
    group per turn (a turn may span fetches), each group's records in offset order. A group
    that runs out leaves the rotation; one that gets a record again (new, released, or due)
    joins it at the back. A group's number stands for its key while any entry of it is in
    the index, so a record released later returns to the same group as the key's newer
    records."""

    _STAYED, _ROTATED, _LEFT = 0, 1, 2

    def __init__(self, per_turn: int = 1) -> None:
        self._per_turn = max(1, per_turn)
        self._queues: dict[int, list[int]] = {}  # group -> its ready entries, a heap
        self._turns: deque[int] = deque()  # the groups with ready entries, next first
        self._groups: dict[bytes | None, int] = {}  # fairness key -> group
        self._keys: dict[int, bytes | None] = {}  # group -> fairness key
        self._entries: dict[int, int] = {}  # group -> its entries anywhere in the index
        self._next_group = 0
        self._ready = 0
        self._used = 0  # records the group at the front took in its current turn
        # For each record of the last `take`: (`_used` before it, what its group did then).
        self._steps: list[tuple[int, int]] = []

    def rank(self, values: tuple[bytes | None, ...]) -> int:
        fairness_key = values[2] if len(values) > 2 else None
        group = self._groups.get(fairness_key)
        if group is None:
            group = self._next_group
            self._next_group += 1
            self._groups[fairness_key] = group
            self._keys[group] = fairness_key
        self._entries[group] = self._entries.get(group, 0) + 1
        return group

    def push(self, key: int) -> None:
        group = key // _OFFSETS
        queue = self._queues.get(group)
        if queue is None:
            self._queues[group] = [key]
            self._turns.append(group)
        else:
            heapq.heappush(queue, key)
        self._ready += 1

    def take(self, max_records: int, live: Callable[[int], bool]) -> list[int]:
        taken: list[int] = []
        steps = self._steps
        steps.clear()
        turns, queues = self._turns, self._queues
        while turns and len(taken) < max_records:
            group = turns[0]
            queue = queues[group]
            used = self._used
            got = False
            while queue:
                key = heapq.heappop(queue)
                self._ready -= 1
                if live(key):
                    taken.append(key)
                    got = True
                    break
                self.forget(key)
            if not queue:
                turns.popleft()
                del queues[group]
                self._used = 0
                step = self._LEFT
            elif used + 1 >= self._per_turn:
                turns.popleft()
                turns.append(group)
                self._used = 0
                step = self._ROTATED
            else:
                self._used = used + 1
                step = self._STAYED
            if got:
                steps.append((used, step))
        return taken

    def give_back(self, keys: list[int]) -> None:
        # Undoes the steps of `take` from the last: each took one record from the group at
        # the front, which then kept the front, went to the back or left the rotation.
        turns, queues, steps = self._turns, self._queues, self._steps
        for key in reversed(keys):
            used, step = steps.pop() if steps else (0, self._LEFT)
            group = key // _OFFSETS
            queue = queues.get(group)
            if queue is None:
                queues[group] = [key]
            else:
                heapq.heappush(queue, key)
            if step == self._ROTATED and turns and turns[-1] == group:
                turns.pop()
            if step != self._STAYED or not turns or turns[0] != group:
                turns.appendleft(group)
            self._used = used
            self._ready += 1

    def forget(self, key: int) -> None:
        group = key // _OFFSETS
        left = self._entries.get(group, 0) - 1
        if left > 0:
            self._entries[group] = left
            return
        self._entries.pop(group, None)
        fairness_key = self._keys.pop(group, None)
        if self._groups.get(fairness_key) == group:
            del self._groups[fairness_key]

    def groups(self) -> int:
        """Fairness groups with entries in the index."""
        return len(self._entries)

    def __len__(self) -> int:
        return self._ready


def ready_queue(order: IndexedOrder) -> ReadyQueue:
    return FairRotation(order.per_turn) if order.fair is not None else PriorityHeap(order)


_SPAN_CHUNK_BITS = 16
_SPAN_CHUNK = 1 << _SPAN_CHUNK_BITS


class RecordSpans:
    """Where each indexed record's bytes lie in its batch (start from the batch's first
    byte, length), so a fetch reads and sends the records it acquired, not the batches
    around them. Eight bytes a record, in chunks of 65,536 offsets dropped whole once below
    the share-partition's start offset. A length of 0: not known (the record lies in a
    compressed batch), its whole batch is sent."""

    def __init__(self) -> None:
        self._chunks: dict[int, array[int]] = {}

    def put(self, offset: int, start: int, length: int) -> None:
        if length <= 0 or start > 0xFFFFFFFF or length > 0xFFFFFFFF:
            return
        chunk = self._chunks.get(offset >> _SPAN_CHUNK_BITS)
        if chunk is None:
            chunk = self._chunks[offset >> _SPAN_CHUNK_BITS] = array("I", bytes(8 * _SPAN_CHUNK))
        at = 2 * (offset & (_SPAN_CHUNK - 1))
        chunk[at] = start
        chunk[at + 1] = length

    def get(self, offset: int) -> tuple[int, int] | None:
        """(start, length) of the record at `offset` in its batch, None when not known."""
        chunk = self._chunks.get(offset >> _SPAN_CHUNK_BITS)
        if chunk is None:
            return None
        at = 2 * (offset & (_SPAN_CHUNK - 1))
        length = chunk[at + 1]
        return (chunk[at], length) if length else None

    def drop_below(self, offset: int) -> None:
        """Forget the chunks wholly below `offset`."""
        below = offset >> _SPAN_CHUNK_BITS
        if self._chunks and min(self._chunks) < below:
            for first in [c for c in self._chunks if c < below]:
                del self._chunks[first]

    def __len__(self) -> int:
        """Chunks held."""
        return len(self._chunks)


class DeliveryIndex:
    def __init__(self, order: IndexedOrder, scanned_to: int) -> None:
        self.order = order
        #: The offset the log is read from next: records below it are indexed.
        self.scanned_to = scanned_to
        self.ready = ready_queue(order)
        self.spans = RecordSpans()
        self._delayed: list[tuple[int, int]] = []  # (deliver at, key)
        self._acquired: dict[int, int] = {}  # offset -> key, for the records acquired

    def add(
        self,
        records: Iterable[IndexedRecord],
        next_offset: int,
        state: SharePartition | None = None,
        spans: list[int] | None = None,
    ) -> None:
        """Index the records read from the log (offset, values as `IndexedRecord`), which end
        just before `next_offset`; with `state`, those it holds as done (a share-partition
        reloaded after a restart) are left out. `spans`: where each record lies in its batch
        (start, length, flattened in the order of `records`), kept for `spans.get`."""
        ready = self.ready
        put_span = self.spans.put
        known = -1 if state is None else state.next_offset
        # Priority changes and release delays kept in the share-partition's state (rare:
        # looked up only when there are some).
        priorities = state.priorities if state is not None and self.order.by_priority else None
        delays = state.delays if state is not None else None
        for n, (offset, values) in enumerate(records):
            if offset < self.scanned_to:
                continue
            if offset < known and state is not None and not state.is_available(offset):
                continue
            if spans is not None:
                put_span(offset, spans[2 * n], spans[2 * n + 1])
            rank = ready.rank(values)
            deliver_at = parse_long(values[1])
            if priorities and offset in priorities:
                rank = priorities[offset]
            if delays and offset in delays:
                deliver_at = max(deliver_at or 0, delays[offset])
            key = rank * _OFFSETS + offset
            if deliver_at is None:
                ready.push(key)
            else:
                heapq.heappush(self._delayed, (deliver_at, key))
        self.scanned_to = max(self.scanned_to, next_offset)

    def override(
        self, offset: int, priority: int, deliver_at: int | None, now_wall_ms: int
    ) -> None:
        """A record's priority changed (already set in the share-partition's
        `priorities`): its new entry, acquirable at `deliver_at` (its header's or its release
        delay) when later than now. One acquired returns with it when released; one not read
        from the log yet gets it when read."""
        key = priority * _OFFSETS + offset
        if offset in self._acquired:
            self._acquired[offset] = key
        elif offset < self.scanned_to:
            if deliver_at is not None and deliver_at > now_wall_ms:
                heapq.heappush(self._delayed, (deliver_at, key))
            else:
                self.ready.push(key)

    def settle(self, state: SharePartition) -> None:
        """Take in what left ACQUIRED since the last call: records available again return
        to their queue, done ones are forgotten."""
        left = state.left_acquired
        if not left:
            return
        ready = self.ready
        delays = state.delays
        for first, last, new_state in left:
            for offset in range(first, last + 1):
                key = self._acquired.pop(offset, None)
                if key is None:
                    continue
                if new_state != RecordState.AVAILABLE:
                    ready.forget(key)
                elif delays and offset in delays:
                    heapq.heappush(self._delayed, (delays[offset], key))
                else:
                    ready.push(key)
        left.clear()

    def _promote(self, now_wall_ms: int) -> None:
        delayed = self._delayed
        while delayed and delayed[0][0] <= now_wall_ms:
            self.ready.push(heapq.heappop(delayed)[1])

    def next_due_ms(self) -> int | None:
        """The wall time the earliest delayed record becomes acquirable, None without one."""
        return self._delayed[0][0] if self._delayed else None

    def take(self, state: SharePartition, now_wall_ms: int, max_records: int) -> list[int]:
        """Up to `max_records` keys of acquirable records in the index's order, removed from
        it: the caller acquires them (`acquired`) or gives them back (`give_back`)."""
        self.settle(state)
        self._promote(now_wall_ms)
        acquired = self._acquired
        priorities = state.priorities if self.order.by_priority else None

        def live(key: int) -> bool:
            offset = key % _OFFSETS
            # Done, or acquired (it comes back if it is released).
            return offset not in acquired and state.is_available(offset)

        def current(key: int) -> bool:
            # Also not an entry its changed priority replaced.
            if not live(key):
                return False
            changed = priorities.get(key % _OFFSETS) if priorities else None
            return changed is None or changed == key // _OFFSETS

        return self.ready.take(max_records, current if priorities else live)

    def give_back(self, keys: Iterable[int]) -> None:
        """Keys of the last `take` (a suffix of them, in the order taken) not acquired."""
        self.ready.give_back(list(keys))

    def forget(self, key: int) -> None:
        """A key taken and neither acquired nor given back: its record is done."""
        self.ready.forget(key)

    def acquired(self, keys: Iterable[int]) -> None:
        for key in keys:
            self._acquired[key % _OFFSETS] = key

    def in_flight(self) -> int:
        """Records acquired through this index and not yet settled."""
        return len(self._acquired)

    def delayed(self, state: SharePartition, now_wall_ms: int) -> int:
        """Records still delayed at `now_wall_ms`: AVAILABLE, not acquired, and not
        acquirable before a later time (their header's or their release delay)."""
        self.settle(state)  # releases with a delay join the delayed ones
        acquired = self._acquired
        priorities = state.priorities if self.order.by_priority else None
        waiting: set[int] = set()
        for deliver_at, key in self._delayed:
            offset = key % _OFFSETS
            if deliver_at <= now_wall_ms or offset in acquired or not state.is_available(offset):
                continue
            changed = priorities.get(offset) if priorities else None
            if changed is None or changed == key // _OFFSETS:
                waiting.add(offset)
        return len(waiting)

    def counts(self) -> tuple[int, int]:
        """(entries that may be acquirable, entries still delayed): upper bounds, as done
        records are dropped only when reached."""
        return len(self.ready), len(self._delayed)


def runs_of(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending offsets as (first, last) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs
