"""The delivery index of a priority topic's share-partition with the share-partition's
states: lowest (priority, offset) first across the whole backlog, released records coming
back, delayed records held until due, and acknowledgements made out of offset order kept in
the persisted state so a rebuilt index never hands them out again."""

from __future__ import annotations

import random

from raftka.broker.share.delivery_index import (
    DeliveryIndex,
    IndexedOrder,
    offset_of,
    parse_long,
    priority_of,
    runs_of,
)
from raftka.broker.share.partition import (
    AckType,
    Acquired,
    RecordState,
    SharePartition,
)

LOCK_MS = 1000
LIMIT = 3
NOW_WALL = 1_700_000_000_000
Header = tuple[bytes | None, ...]


def indexed(priorities: list[int | None], start: int = 0) -> tuple[SharePartition, DeliveryIndex]:
    state = SharePartition(start)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(True, 5), start)
    index.add(records(priorities, start), start + len(priorities))
    return state, index


def records(priorities: list[int | None], start: int = 0) -> list[tuple[int, Header]]:
    return [
        (start + i, (None if p is None else str(p).encode(), None))
        for i, p in enumerate(priorities)
    ]


def fetch(
    state: SharePartition, index: DeliveryIndex, n: int, member: str = "m", now: int = NOW_WALL
) -> list[int]:
    """Acquire as a fetch does; the offsets acquired in (priority, offset) order."""
    keys = index.take(state, now, n)
    acquired = state.acquire_offsets(member, runs_of(offset_of(k) for k in keys), 0, LOCK_MS)
    index.acquired(keys)
    assert sum(a.last - a.first + 1 for a in acquired) == len(keys)
    return [offset_of(k) for k in keys]


def accept(state: SharePartition, offsets: list[int], member: str = "m") -> None:
    for first, last in runs_of(offsets):
        assert state.acknowledge(member, first, last, [AckType.ACCEPT], LIMIT) == 0


def test_parse_long_takes_ascii_decimal_integers_only() -> None:
    assert parse_long(b"12") == 12 and parse_long(b" -3 ") == -3 and parse_long(b"+4") == 4
    for bad in (None, b"", b"1.5", b"0x10", b"ten", b"\xff", b"9" * 40, str(2**63).encode()):
        assert parse_long(bad) is None


def test_keys_order_by_priority_then_offset_negative_priorities_included() -> None:
    _state, index = indexed([3, -2, 3, None, -2])
    keys = index.take(SharePartition(0), NOW_WALL, 10)
    assert [(priority_of(k), offset_of(k)) for k in keys] == [
        (-2, 1),
        (-2, 4),
        (3, 0),
        (3, 2),
        (5, 3),
    ]


def test_fetches_take_the_whole_backlog_in_priority_order() -> None:
    rng = random.Random(7)
    priorities = [rng.randrange(10) for _ in range(3000)]
    state, index = indexed(list(priorities))
    delivered: list[int] = []
    while chunk := fetch(state, index, 250):
        delivered.extend(chunk)
        accept(state, chunk)
    assert sorted(delivered) == list(range(3000))
    assert delivered == sorted(delivered, key=lambda o: (priorities[o], o))
    assert state.start_offset == 3000 and not state.ranges


def test_acquired_records_are_not_taken_twice_and_released_ones_come_back_first() -> None:
    state, index = indexed([9, 1, 9, 2, 9])
    assert fetch(state, index, 2, member="a") == [1, 3]
    assert fetch(state, index, 1, member="b") == [0]
    assert state.acknowledge("a", 1, 1, [AckType.RELEASE], LIMIT) == 0
    assert state.release_expired(LOCK_MS, LIMIT) == 2  # offsets 3 (a) and 0 (b)
    assert fetch(state, index, 10) == [1, 3, 0, 2, 4]
    delivery_counts = {
        o: a.delivery_count for a in _acquired(state) for o in range(a.first, a.last + 1)
    }
    assert delivery_counts == {0: 2, 1: 2, 2: 1, 3: 2, 4: 1}


def _acquired(state: SharePartition) -> list[Acquired]:
    return [
        Acquired(r.first, r.last, r.delivery_count)
        for r in state.ranges
        if r.state == RecordState.ACQUIRED
    ]


def test_the_delivery_limit_archives_and_nothing_archived_is_taken_again() -> None:
    state, index = indexed([1, 2])
    for _ in range(LIMIT):
        assert fetch(state, index, 1) == [0]
        assert state.acknowledge("m", 0, 0, [AckType.RELEASE], LIMIT) == 0
    assert fetch(state, index, 5) == [1]
    assert state.start_offset == 1


def test_in_flight_counts_the_acquired_records() -> None:
    state, index = indexed([1, 2, 3, 4])
    fetch(state, index, 3)
    assert index.in_flight() == 3
    accept(state, [0, 2])
    index.settle(state)
    assert index.in_flight() == 1


def test_delayed_records_wait_until_due_and_hold_nothing_back() -> None:
    state = SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(True, 0), 0)
    later = str(NOW_WALL + 500).encode()
    index.add(
        [(0, (None, later)), (1, (None, None)), (2, (b"-1", later)), (3, (None, b"bogus"))], 4
    )
    assert index.next_due_ms() == NOW_WALL + 500
    assert fetch(state, index, 10) == [1, 3]
    assert fetch(state, index, 10, now=NOW_WALL + 499) == []
    assert fetch(state, index, 10, now=NOW_WALL + 500) == [2, 0]
    assert index.next_due_ms() is None


def test_out_of_order_acknowledgements_survive_a_rebuild_from_the_persisted_state() -> None:
    rng = random.Random(3)
    priorities = [rng.randrange(100) for _ in range(500)]
    state, index = indexed(list(priorities))
    taken = fetch(state, index, 120)
    accept(state, taken[:100])  # the rest stay acquired: persisted as AVAILABLE
    assert state.start_offset < 120, "acknowledged out of offset order, the start stays low"
    persisted = state.state_batches()
    reloaded = SharePartition(state.start_offset, persisted)
    reloaded.left_acquired = []
    rebuilt = DeliveryIndex(IndexedOrder(True, 5), reloaded.start_offset)
    rebuilt.add(records(list(priorities))[reloaded.start_offset :], 500, reloaded)
    ready, delayed = rebuilt.counts()
    assert (ready, delayed) == (400, 0), "the 100 accepted are not indexed again"
    delivered: list[int] = []
    while chunk := fetch(reloaded, rebuilt, 64):
        delivered.extend(chunk)
        accept(reloaded, chunk)
    assert not set(delivered) & set(taken[:100])
    assert sorted(delivered + taken[:100]) == list(range(500))
    assert delivered == sorted(delivered, key=lambda o: (priorities[o], o))
    counts = {
        o: r.delivery_count
        for r in SharePartition(state.start_offset, persisted).ranges
        for o in range(r.first, r.last + 1)
    }
    assert all(counts[o] == 1 for o in taken[100:])


def test_passed_over_offsets_are_persisted_as_available_with_no_delivery() -> None:
    state, index = indexed([9, 9, 0, 9])
    assert fetch(state, index, 1) == [2]
    accept(state, [2])
    assert [(b.first, b.last, b.state, b.delivery_count) for b in state.state_batches()] == [
        (0, 1, RecordState.AVAILABLE, 0),
        (2, 2, RecordState.ACKNOWLEDGED, 1),
    ]
    assert state.next_offset == 3 and state.is_available(3) and not state.is_available(2)


def test_records_below_a_moved_start_are_dropped() -> None:
    state, index = indexed([5, 1, 5, 0])
    assert fetch(state, index, 1) == [3]
    state.move_start(3)  # retention: offsets 0..2 are gone; 3 stays acquired
    assert fetch(state, index, 10) == []
    index.settle(state)
    assert index.in_flight() == 1
    state.move_start(4)
    index.settle(state)
    assert index.in_flight() == 0


def test_an_index_without_priorities_keeps_offset_order_and_honours_delays() -> None:
    state = SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(False), 0)
    later = str(NOW_WALL + 100).encode()
    index.add([(0, (b"9", None)), (1, (b"-9", later)), (2, (b"1", None))], 3)
    assert fetch(state, index, 10) == [0, 2]
    assert fetch(state, index, 10, now=NOW_WALL + 100) == [1]


def test_acknowledgements_keep_like_neighbours_merged_without_walking_every_range() -> None:
    """Acknowledgements merge only around what they touch; the ranges still never hold two
    neighbours of one kind that a merge of the whole list would join."""
    rng = random.Random(11)
    state, index = indexed([rng.randrange(30) for _ in range(2000)])
    for _ in range(40):
        taken = fetch(state, index, 60)
        for first, last in runs_of(taken):
            ack = rng.choice([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT])
            assert state.acknowledge("m", first, last, [ack], LIMIT) == 0
        ranges = list(state.ranges)
        for left, right in zip(ranges, ranges[1:], strict=False):
            assert left.last + 1 == right.first
            assert right.state == RecordState.ACQUIRED or not left.same_kind(right)
