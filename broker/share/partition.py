"""A share-partition (KIP-932): which records of one partition a share group has handed out.

Kept by the partition's leader, one per (group, partition), as a pure state machine that is
given the time. Offsets below `start_offset` (Kafka's SPSO) are done; offsets from
`next_offset` on were never acquired; in between, `ranges` holds consecutive offset ranges,
each in one state with one delivery count, in a `RangeList` (sorted in chunks, so finding,
splitting and merging a range costs the same however many there are). Records are never
looked at: a fetch acquires an offset range, an acknowledgement of part of a range splits
it.

On a priority topic a fetch acquires chosen offsets anywhere past the start
(`acquire_offsets`); the never-acquired offsets it passes over become AVAILABLE ranges with
no deliveries, so the ranges still cover every offset from the start to `next_offset`.

Two maps of single records are persisted beside the ranges (raftka's own, set through the
queue API): `priorities`, a queued record's priority changed from its header's, and
`delays`, the wall time (epoch milliseconds) before which a record released with a delay is
not acquirable again. A queued record can also be cancelled (`cancel`): it is ARCHIVED as
a rejected one is, without a delivery.

Every change records the span of offsets it touched, so what a write of the state must
carry since the previous one (`take_changes`) costs the change, not the whole state.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from raftka.broker.share.range_list import RangeList


class RecordState(enum.IntEnum):
    """Kafka's record states; the values are those `__share_group_state` stores."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlight:
    """Offsets [first, last] in one state; `member_id` and `lock_deadline_ms` only while
    ACQUIRED."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: float = 0.0

    def same_kind(self, other: InFlight) -> bool:
        return (
            self.state == other.state
            and self.delivery_count == other.delivery_count
            and self.member_id == other.member_id
            and self.lock_deadline_ms == other.lock_deadline_ms
        )


@dataclass(frozen=True, slots=True)
class Acquired:
    first: int
    last: int
    delivery_count: int


#: Changed spans kept before they are joined (see `SharePartition._touched`).
_CHANGED_SPANS_MAX = 4096


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted range: ACQUIRED ranges are stored as AVAILABLE (their locks die with the
    leader), with the deliveries made so far."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateChanges:
    """What changed in a share-partition over some time: `spans` (ascending, disjoint), and
    all that is now in them of its state batches, priorities and delays."""

    spans: tuple[tuple[int, int], ...]
    batches: tuple[StateBatch, ...]
    priorities: tuple[tuple[int, int], ...]
    delays: tuple[tuple[int, int], ...]


class SharePartition:
    def __init__(
        self,
        start_offset: int,
        state_batches: Iterable[StateBatch] = (),
        priorities: Iterable[tuple[int, int]] = (),
        delays: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.start_offset = start_offset
        loaded = [
            InFlight(max(b.first, start_offset), b.last, b.state, b.delivery_count)
            for b in sorted(state_batches, key=lambda b: b.first)
            if b.last >= start_offset
        ]
        self.ranges: RangeList[InFlight] = RangeList(loaded)
        self.next_offset = loaded[-1].last + 1 if loaded else start_offset
        # Bumped by every change a persisted copy must see.
        self.version = 0
        # When a list (a priority topic's index reads it): every range that left ACQUIRED,
        # with the state it went to, in order.
        self.left_acquired: list[tuple[int, int, RecordState]] | None = None
        #: offset -> the priority a record was given instead of its header's.
        self.priorities: dict[int, int] = {o: p for o, p in priorities if o >= start_offset}
        #: offset -> the wall time (epoch ms) a record released with a delay is due again.
        self.delays: dict[int, int] = {o: at for o, at in delays if o >= start_offset}
        # [first, last] spans changed since the last `take_changes` or `clear_changes`.
        self._changed: list[tuple[int, int]] = []
        # (lock deadline, first, last) of each acquisition, soonest first; an entry whose
        # ranges were settled since is dropped when it comes first.
        self._locks: list[tuple[float, int, int]] = []

    # -- reading ----------------------------------------------------------------------------

    def state_batches(self) -> list[StateBatch]:
        """What is persisted: every in-flight range, ACQUIRED written as AVAILABLE."""
        out: list[StateBatch] = []
        for r in self.ranges:
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            batch = StateBatch(r.first, r.last, state, r.delivery_count)
            if out and out[-1].state == state and out[-1].delivery_count == r.delivery_count:
                out[-1] = StateBatch(out[-1].first, r.last, state, r.delivery_count)
            else:
                out.append(batch)
        return out

    def take_changes(self) -> StateChanges:
        """What changed since the last call (or `clear_changes`): the changed spans from the
        start on, and the state batches, priorities and delays now in them (pruned as
        `state_batches`, `kept_priorities` and `kept_delays` prune). Costs the spans'
        ranges and entries, not the whole state."""
        spans = [
            (max(first, self.start_offset), last)
            for first, last in merge_spans(self._changed)
            if last >= self.start_offset
        ]
        self._changed = []
        batches: list[StateBatch] = []
        priorities: list[tuple[int, int]] = []
        delays: list[tuple[int, int]] = []
        for first, last in spans:
            within: list[StateBatch] = []
            in_flight_last = min(last, self.next_offset - 1)
            for r in (
                self.ranges.overlapping(first, in_flight_last) if first <= in_flight_last else ()
            ):
                state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
                lo, hi = max(r.first, first), min(r.last, last)
                if (
                    within
                    and within[-1].state == state
                    and (within[-1].delivery_count == r.delivery_count)
                ):
                    within[-1] = StateBatch(within[-1].first, hi, state, r.delivery_count)
                else:
                    within.append(StateBatch(lo, hi, state, r.delivery_count))
            batches.extend(within)
            for offset in _entries_within(self.priorities, first, last):
                if self._done(offset):
                    del self.priorities[offset]
                else:
                    priorities.append((offset, self.priorities[offset]))
            for offset in _entries_within(self.delays, first, last):
                if self._done(offset):
                    del self.delays[offset]
                else:
                    delays.append((offset, self.delays[offset]))
        return StateChanges(tuple(spans), tuple(batches), tuple(priorities), tuple(delays))

    def clear_changes(self) -> None:
        """A whole snapshot of the state is being written: nothing is owed before it."""
        self._changed = []

    def _touched(self, first: int, last: int) -> None:
        self._changed.append((first, last))
        if len(self._changed) > _CHANGED_SPANS_MAX:
            # Many changes between two writes (fetches without acknowledgements): joined,
            # the list stays about as long as the state's ranges.
            self._changed = merge_spans(self._changed)

    def kept_priorities(self) -> list[tuple[int, int]]:
        """The priority changes still to persist (of records not done), pruning the rest."""
        if self.priorities:
            self.priorities = {o: p for o, p in self.priorities.items() if not self._done(o)}
        return sorted(self.priorities.items())

    def kept_delays(self) -> list[tuple[int, int]]:
        """The release delays still to persist (of records not done: available, or held by
        a member whose release with the delay waits for its write), pruning the rest."""
        if self.delays:
            self.delays = {o: at for o, at in self.delays.items() if not self._done(o)}
        return sorted(self.delays.items())

    def state_of(self, offset: int) -> RecordState:
        """A record's state: ACKNOWLEDGED for offsets below the start (done, whichever way),
        AVAILABLE for those never acquired."""
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED
        if offset >= self.next_offset:
            return RecordState.AVAILABLE
        r = self.ranges.covering(offset)
        return r.state if r is not None else RecordState.AVAILABLE

    def _done(self, offset: int) -> bool:
        return self.state_of(offset) in _DONE

    def counts(self) -> dict[RecordState, int]:
        """Records per state among the in-flight ones."""
        totals = dict.fromkeys(RecordState, 0)
        for r in self.ranges:
            totals[r.state] += r.last - r.first + 1
        return totals

    def is_available(self, offset: int) -> bool:
        """Whether a fetch may acquire `offset`: past the start and AVAILABLE or new."""
        if offset < self.start_offset:
            return False
        if offset >= self.next_offset:
            return True
        r = self.ranges.covering(offset)
        return r is not None and r.state == RecordState.AVAILABLE

    def acquired_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.ranges if r.state == RecordState.ACQUIRED)

    def next_available(self) -> int | None:
        """The lowest offset a fetch could acquire (in flight and AVAILABLE, or new), or None
        when only new records could be and there are none yet is up to the caller."""
        for r in self.ranges:
            if r.state == RecordState.AVAILABLE:
                return r.first
        return self.next_offset

    # -- changes ----------------------------------------------------------------------------

    def move_start(self, offset: int) -> None:
        """The log no longer holds offsets below `offset` (retention, DeleteRecords) or a new
        share-partition starts there: everything below is done."""
        if offset <= self.start_offset:
            return
        self._split_at(offset)
        if self.left_acquired is not None:
            self.left_acquired.extend(
                (r.first, r.last, RecordState.ARCHIVED)
                for r in self.ranges.overlapping(self.start_offset, offset - 1)
                if r.state == RecordState.ACQUIRED
            )
        self.ranges.drop_below(offset)
        self.start_offset = offset
        self.next_offset = max(self.next_offset, offset)
        # Records past the new start may be done already (acknowledged out of order).
        self._advance_start()
        self.version += 1

    def acquire(
        self,
        member_id: str,
        stop_offset: int,
        max_records: int,
        max_in_flight: int,
        now_ms: float,
        lock_ms: int,
    ) -> list[Acquired]:
        """Acquire up to `max_records` records below `stop_offset` (the end of the batches a
        fetch read) for `member_id`: AVAILABLE ones first, lowest offsets first, then new ones
        while fewer than `max_in_flight` offsets are in flight. Ranges acquired together with
        the same delivery count are answered as one."""
        deadline = now_ms + lock_ms
        acquired: list[Acquired] = []
        budget = max_records
        if self.next_offset - self.start_offset > max_in_flight:
            # Records cancelled past the window left AVAILABLE ones before them: the locks
            # stay bounded all the same.
            budget = min(budget, max_in_flight - self.acquired_count())
        for r in self.ranges.overlapping(self.start_offset, stop_offset - 1):
            if budget <= 0:
                break
            if r.state != RecordState.AVAILABLE:
                continue
            last = min(r.last, stop_offset - 1, r.first + budget - 1)
            if last < r.last:
                self._split_at(last + 1)  # `r` ends at `last` now
            r.state = RecordState.ACQUIRED
            r.delivery_count += 1
            r.member_id = member_id
            r.lock_deadline_ms = deadline
            self._touched(r.first, r.last)
            heapq.heappush(self._locks, (deadline, r.first, r.last))
            budget -= r.last - r.first + 1
            acquired.append(Acquired(r.first, r.last, r.delivery_count))
        room = self.start_offset + max_in_flight - self.next_offset
        last = min(stop_offset - 1, self.next_offset + min(budget, room) - 1)
        if budget > 0 and last >= self.next_offset:
            new = InFlight(self.next_offset, last, RecordState.ACQUIRED, 1, member_id, deadline)
            self.ranges.append(new)
            self._touched(new.first, new.last)
            heapq.heappush(self._locks, (deadline, new.first, new.last))
            self.next_offset = last + 1
            acquired.append(Acquired(new.first, new.last, 1))
        if acquired:
            self.version += 1
        return _merged(acquired)

    def acquire_offsets(
        self, member_id: str, runs: list[tuple[int, int]], now_ms: float, lock_ms: int
    ) -> list[Acquired]:
        """Acquire the AVAILABLE (or new) offsets of `runs` (ascending, disjoint, each
        [first, last]) for `member_id`; offsets not available are left out."""
        deadline = now_ms + lock_ms
        acquired: list[Acquired] = []
        for first, last in runs:
            if last < self.start_offset:
                continue
            first = max(first, self.start_offset)
            if first < self.next_offset:
                inside = min(last, self.next_offset - 1)
                self._split_at(first)
                self._split_at(inside + 1)
                for r in self.ranges.overlapping(first, inside):
                    if r.state != RecordState.AVAILABLE:
                        continue
                    r.state = RecordState.ACQUIRED
                    r.delivery_count += 1
                    r.member_id = member_id
                    r.lock_deadline_ms = deadline
                    self._touched(r.first, r.last)
                    heapq.heappush(self._locks, (deadline, r.first, r.last))
                    acquired.append(Acquired(r.first, r.last, r.delivery_count))
                first = inside + 1
            if first > last:
                continue
            if first > self.next_offset:
                # Passed over, never acquired: available, with no deliveries.
                tail = self.ranges.last()
                if (
                    tail is not None
                    and tail.state == RecordState.AVAILABLE
                    and tail.delivery_count == 0
                ):
                    tail.last = first - 1
                else:
                    self.ranges.append(
                        InFlight(self.next_offset, first - 1, RecordState.AVAILABLE, 0)
                    )
            self.ranges.append(InFlight(first, last, RecordState.ACQUIRED, 1, member_id, deadline))
            # With the passed-over gap before it, if any.
            self._touched(self.next_offset, last)
            heapq.heappush(self._locks, (deadline, first, last))
            self.next_offset = last + 1
            acquired.append(Acquired(first, last, 1))
        if acquired:
            self.version += 1
        return _merged(acquired)

    def acknowledgement_error(
        self, member_id: str, first: int, last: int, ack_types: list[int]
    ) -> ErrorCode:
        """Why `acknowledge` would refuse this batch (ErrorCode.none: it would apply it):
        INVALID_REQUEST for a malformed batch, INVALID_RECORD_STATE when an offset is not
        ACQUIRED by `member_id`."""
        if last < first or not ack_types:
            return ErrorCode.invalid_request
        if len(ack_types) != 1 and len(ack_types) != last - first + 1:
            return ErrorCode.invalid_request
        if any(t not in AckType.__members__.values() for t in ack_types):
            return ErrorCode.invalid_request
        for run_first, run_last, _ack in _runs(first, last, ack_types):
            if not self._held_by(member_id, run_first, run_last):
                return ErrorCode.invalid_record_state
        return ErrorCode.none

    def acknowledge(
        self,
        member_id: str,
        first: int,
        last: int,
        ack_types: list[int],
        delivery_limit: int,
        releases: list[tuple[int, int, int]] | None = None,
    ) -> ErrorCode:
        """Apply one acknowledgement batch: one type for the whole range, or one per offset.
        Every offset must be ACQUIRED by `member_id`, else INVALID_RECORD_STATE and nothing
        changes. With a `releases` list, RELEASE runs are added to it (first, last and the
        delivery count of that acquisition) and their records stay with the member (those
        at the delivery limit are archived now): the caller makes them available by
        `release_held` once the acknowledgement is persisted, so an acknowledgement whose
        write fails has handed nothing to another member. (What is persisted is the same
        either way: an acquired record is written as available.)"""
        error = self.acknowledgement_error(member_id, first, last, ack_types)
        if error != ErrorCode.none:
            return error
        for run_first, run_last, ack in _runs(first, last, ack_types):
            if ack == AckType.GAP:
                # Offsets with no record (compacted away, control batches): nothing to deliver.
                self._set(run_first, run_last, member_id, RecordState.ARCHIVED, delivery_limit)
            elif ack == AckType.ACCEPT:
                self._set(run_first, run_last, member_id, RecordState.ACKNOWLEDGED, delivery_limit)
            elif ack == AckType.RELEASE and releases is not None:
                self._archive_at_limit(run_first, run_last, member_id, delivery_limit)
                releases.extend(
                    (max(r.first, run_first), min(r.last, run_last), r.delivery_count)
                    for r in self.ranges.overlapping(run_first, run_last)
                    if r.state == RecordState.ACQUIRED
                )
            elif ack == AckType.RELEASE:
                self._set(run_first, run_last, member_id, RecordState.AVAILABLE, delivery_limit)
            else:
                self._set(run_first, run_last, member_id, RecordState.ARCHIVED, delivery_limit)
        self._advance_start()
        self.version += 1
        return ErrorCode.none

    def set_priority(self, offset: int, priority: int) -> None:
        """A queued record's priority changed (the caller checked it is not done)."""
        self.priorities[offset] = priority
        self._touched(offset, offset)
        self.version += 1

    def cancel(self, offset: int) -> None:
        """A queued record (AVAILABLE, checked by the caller) is ARCHIVED without a delivery,
        as if rejected: it is never acquired."""
        self._touched(min(offset, self.next_offset), offset)
        if offset >= self.next_offset:
            if offset > self.next_offset:
                last = self.ranges.last()
                if (
                    last is not None
                    and last.state == RecordState.AVAILABLE
                    and last.delivery_count == 0
                ):
                    last.last = offset - 1
                else:
                    self.ranges.append(
                        InFlight(self.next_offset, offset - 1, RecordState.AVAILABLE, 0)
                    )
            self.ranges.append(InFlight(offset, offset, RecordState.ARCHIVED, 0))
            self.next_offset = offset + 1
        else:
            self._split_at(offset)
            self._split_at(offset + 1)
            for r in self.ranges.overlapping(offset, offset):
                r.state = RecordState.ARCHIVED
        self.priorities.pop(offset, None)
        self.delays.pop(offset, None)
        self._coalesce_around(offset, offset)
        self._advance_start()
        self.version += 1

    def delay_release(self, member_id: str, offset: int, due_ms: int) -> bool:
        """Before `member_id` releases `offset`: once released it is not acquirable before
        `due_ms` (wall time, epoch ms). False (nothing kept) when the member does not hold
        it."""
        if not self._held_by(member_id, offset, offset):
            return False
        self.delays[offset] = due_ms
        self._touched(offset, offset)
        return True

    def undo_delay(self, offset: int) -> None:
        """Forget a delay marked by `delay_release` whose release did not happen."""
        if self.delays.pop(offset, None) is not None:
            self._touched(offset, offset)

    def release_expired(self, now_ms: float, delivery_limit: int) -> int:
        """Locks past their deadline return their records (archived at the delivery limit);
        the number of records released. Costs the acquisitions whose deadline passed, not
        the ranges (on a priority topic as many as its backlog)."""
        released = 0
        while self._locks and self._locks[0][0] <= now_ms:
            _deadline, first, last = heapq.heappop(self._locks)
            expired = [
                r
                for r in self.ranges.overlapping(first, last)
                if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms
            ]
            if expired:
                released += self._release_ranges(expired, delivery_limit)
                self._coalesce_around(first, last)
        if released:
            self._advance_start()
            self.version += 1
        return released

    def release_held(
        self, member_id: str, runs: list[tuple[int, int, int]], delivery_limit: int
    ) -> int:
        """The RELEASE runs `acknowledge` put aside, now persisted: what `member_id` still
        holds of them from the same acquisition (the same delivery count) is available
        again. A lock that expired meanwhile released its part already, and a record the
        member has acquired again since is held by that new delivery, not released. The
        number of records released."""
        released = 0
        for first, last, delivery_count in runs:
            if last < self.start_offset or first >= self.next_offset:
                continue
            first, last = max(first, self.start_offset), min(last, self.next_offset - 1)
            self._split_at(first)
            self._split_at(last + 1)
            held = [
                r
                for r in self.ranges.overlapping(first, last)
                if r.state == RecordState.ACQUIRED
                and r.member_id == member_id
                and r.delivery_count == delivery_count
            ]
            released += self._release_ranges(held, delivery_limit)
            self._coalesce_around(first, last)
        if released:
            self._advance_start()
            self.version += 1
        return released

    def release_member(self, member_id: str, delivery_limit: int) -> int:
        """A member's share session closed or it left: its records are available again."""
        return self._release(lambda r: r.member_id == member_id, delivery_limit)

    def next_lock_deadline_ms(self) -> float | None:
        while self._locks:
            deadline, first, last = self._locks[0]
            for r in self.ranges.overlapping(first, last):
                if r.state == RecordState.ACQUIRED and r.lock_deadline_ms == deadline:
                    return deadline
            # Every range of that acquisition was acknowledged, released or dropped.
            heapq.heappop(self._locks)
        return None

    # -- internals --------------------------------------------------------------------------

    def _release(self, which: object, delivery_limit: int) -> int:
        held = [
            r
            for r in self.ranges
            if r.state == RecordState.ACQUIRED and which(r)  # type: ignore[operator]
        ]
        released = self._release_ranges(held, delivery_limit)
        if released:
            self._coalesce()
            self._advance_start()
            self.version += 1
        return released

    def _release_ranges(self, held: list[InFlight], delivery_limit: int) -> int:
        """Make the ACQUIRED ranges `held` available (archived at the delivery limit); the
        number of records released. The caller coalesces."""
        released = 0
        for r in held:
            released += r.last - r.first + 1
            r.state = (
                RecordState.ARCHIVED
                if r.delivery_count >= delivery_limit
                else RecordState.AVAILABLE
            )
            if self.left_acquired is not None:
                self.left_acquired.append((r.first, r.last, r.state))
            r.member_id = ""
            r.lock_deadline_ms = 0.0
            self._touched(r.first, r.last)
        return released

    def _held_by(self, member_id: str, first: int, last: int) -> bool:
        if first < self.start_offset or last >= self.next_offset:
            return False
        for r in self.ranges.overlapping(first, last):
            if r.state != RecordState.ACQUIRED or r.member_id != member_id:
                return False
        return True

    def _set(
        self,
        first: int,
        last: int,
        member_id: str,
        state: RecordState,
        delivery_limit: int,
    ) -> None:
        if last < self.start_offset or first >= self.next_offset:
            return
        first = max(first, self.start_offset)
        last = min(last, self.next_offset - 1)
        self._split_at(first)
        self._split_at(last + 1)
        for r in self.ranges.overlapping(first, last):
            if r.member_id != member_id:
                continue
            if state == RecordState.AVAILABLE and r.delivery_count >= delivery_limit:
                r.state = RecordState.ARCHIVED
            else:
                r.state = state
            if self.left_acquired is not None:
                self.left_acquired.append((r.first, r.last, r.state))
            r.member_id = ""
            r.lock_deadline_ms = 0.0
        self._touched(first, last)
        self._coalesce_around(first, last)

    def _archive_at_limit(self, first: int, last: int, member_id: str, delivery_limit: int) -> None:
        """Of the member's records in [first, last] (all ACQUIRED by it), archive those a
        release would archive: delivered `delivery_limit` times."""
        done = [
            r
            for r in self.ranges.overlapping(first, last)
            if r.member_id == member_id and r.delivery_count >= delivery_limit
        ]
        for r in done:
            self._set(max(r.first, first), min(r.last, last), member_id, RecordState.ARCHIVED, 0)

    def _split_at(self, offset: int) -> None:
        """Make `offset` the first of a range, when a range spans it."""
        r = self.ranges.covering(offset)
        if r is not None and r.first < offset:
            tail = InFlight(
                offset, r.last, r.state, r.delivery_count, r.member_id, r.lock_deadline_ms
            )
            r.last = offset - 1
            self.ranges.insert(tail)

    def _coalesce(self) -> None:
        """Merge every adjacent like pair of ranges (never acquired ones): a walk of them
        all, for what changes many ranges at once (a member's records released)."""
        merged: list[InFlight] = []
        for r in self.ranges:
            if _joins(merged[-1] if merged else None, r):
                merged[-1].last = r.last
            else:
                merged.append(r)
        if len(merged) != len(self.ranges):
            self.ranges = RangeList(merged)

    def _coalesce_around(self, first: int, last: int) -> None:
        """`_coalesce` for the ranges overlapping [first, last] and one on each side: a
        change costs the ranges it touches, not all of them (a priority topic's ranges can
        be as many as its backlog)."""
        previous: InFlight | None = None
        for r in self.ranges.around(first, last):
            if _joins(previous, r):
                assert previous is not None
                previous.last = r.last
                self.ranges.remove(r)
            else:
                previous = r

    def _advance_start(self) -> None:
        ranges = self.ranges
        while ranges:
            r = ranges.first()
            assert r is not None
            if r.state not in _DONE:
                break
            ranges.pop_first()
            self.start_offset = r.last + 1


def _joins(previous: InFlight | None, r: InFlight) -> bool:
    """Whether `r` merges into `previous`, the range before it: adjacent, alike, and not
    ACQUIRED (each acquisition keeps its own lock)."""
    return (
        previous is not None
        and r.state != RecordState.ACQUIRED
        and previous.last + 1 == r.first
        and previous.same_kind(r)
    )


def _runs(first: int, last: int, ack_types: list[int]) -> Iterator[tuple[int, int, int]]:
    """(first, last, type) of each run of equal types."""
    if len(ack_types) == 1:
        yield first, last, ack_types[0]
        return
    run_first = first
    for i in range(1, len(ack_types) + 1):
        if i == len(ack_types) or ack_types[i] != ack_types[i - 1]:
            yield run_first, first + i - 1, ack_types[i - 1]
            run_first = first + i


def _merged(acquired: list[Acquired]) -> list[Acquired]:
    out: list[Acquired] = []
    for a in acquired:
        if out and out[-1].last + 1 == a.first and out[-1].delivery_count == a.delivery_count:
            out[-1] = Acquired(out[-1].first, a.last, a.delivery_count)
        else:
            out.append(a)
    return out


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of `spans` ([first, last] each), ascending, disjoint, adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


def _entries_within(entries: dict[int, int], first: int, last: int) -> list[int]:
    """The offsets of `entries` in [first, last], ascending: by probing the span's offsets
    or by scanning the entries, whichever is fewer."""
    if not entries:
        return []
    if last - first + 1 <= len(entries):
        return [o for o in range(first, last + 1) if o in entries]
    return sorted(o for o in entries if first <= o <= last)
