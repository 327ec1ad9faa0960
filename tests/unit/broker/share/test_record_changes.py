"""Changes to single records a share group keeps in its state (the queue API's priority
changes, cancellations and delayed releases): the index honours them at once, they are
persisted beside the ranges and a share-partition rebuilt from the persisted state (a
restart, a new leader) honours them too; a state record without them is the one raftka
wrote before."""

from __future__ import annotations

import json

from raftka.broker.share.delivery_index import DeliveryIndex, IndexedOrder, offset_of, runs_of
from raftka.broker.share.manager import PersistedState
from raftka.broker.share.partition import AckType, RecordState, SharePartition, StateBatch
from raftka.broker.share.state_store import decode_state, encode_state

LOCK_MS = 1000
LIMIT = 5
NOW_WALL = 1_700_000_000_000
DEFAULT = 5


def records(
    priorities: list[int], delays: dict[int, int] | None = None
) -> list[tuple[int, tuple[bytes | None, ...]]]:
    due = delays or {}
    return [
        (i, (str(p).encode(), None if i not in due else str(due[i]).encode()))
        for i, p in enumerate(priorities)
    ]


def indexed(
    priorities: list[int], state: SharePartition | None = None
) -> tuple[SharePartition, DeliveryIndex]:
    state = state if state is not None else SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(True, DEFAULT), state.start_offset)
    index.add(records(priorities), len(priorities), state)
    return state, index


def fetch(state: SharePartition, index: DeliveryIndex, n: int, now: int = NOW_WALL) -> list[int]:
    keys = index.take(state, now, n)
    state.acquire_offsets("m", runs_of(offset_of(k) for k in keys), 0, LOCK_MS)
    index.acquired(keys)
    return [offset_of(k) for k in keys]


def settle(state: SharePartition, offset: int, ack: AckType) -> None:
    assert state.acknowledge("m", offset, offset, [ack], LIMIT) == 0


def rebuilt(state: SharePartition, priorities: list[int]) -> tuple[SharePartition, DeliveryIndex]:
    """The share-partition and index a new leader builds from the persisted state."""
    persisted = decode_state(
        encode_state(
            PersistedState(
                1,
                state.start_offset,
                tuple(state.state_batches()),
                tuple(state.kept_priorities()),
                tuple(state.kept_delays()),
            )
        )
    )
    return indexed(
        priorities,
        SharePartition(
            persisted.start_offset, persisted.batches, persisted.priorities, persisted.delays
        ),
    )


def test_a_changed_priority_moves_a_queued_record_at_once_both_ways() -> None:
    state, index = indexed([1, 2, 3, 4])
    state.set_priority(3, 0)  # most urgent now
    index.override(3, 0, None, NOW_WALL)
    state.set_priority(0, 9)  # least urgent now
    index.override(0, 9, None, NOW_WALL)
    assert fetch(state, index, 10) == [3, 1, 2, 0]


def test_changing_a_priority_back_hands_the_record_out_once() -> None:
    state, index = indexed([4, 2, 6])
    for priority in (0, 4, 4):
        state.set_priority(0, priority)
        index.override(0, priority, None, NOW_WALL)
    assert fetch(state, index, 10) == [1, 0, 2]
    assert fetch(state, index, 10) == []


def test_a_record_in_flight_returns_at_its_new_priority_when_released() -> None:
    state, index = indexed([1, 2, 3])
    assert fetch(state, index, 1) == [0]
    state.set_priority(0, 7)
    index.override(0, 7, None, NOW_WALL)
    settle(state, 0, AckType.RELEASE)
    assert fetch(state, index, 10) == [1, 2, 0]


def test_a_changed_priority_of_a_delayed_record_still_waits_for_its_time() -> None:
    state = SharePartition(0)
    state.left_acquired = []
    index = DeliveryIndex(IndexedOrder(True, DEFAULT), 0)
    index.add(records([5, 5, 5], {0: NOW_WALL + 100}), 3, state)
    state.set_priority(0, -1)
    index.override(0, -1, NOW_WALL + 100, NOW_WALL)
    assert fetch(state, index, 10) == [1, 2]
    assert fetch(state, index, 10, now=NOW_WALL + 100) == [0]


def test_cancelled_records_are_never_handed_out_and_count_as_archived() -> None:
    state, index = indexed([1, 2, 3, 4, 5])
    assert fetch(state, index, 1) == [0]
    state.cancel(3)  # never acquired, past the acquired ones
    state.cancel(1)
    settle(state, 0, AckType.RELEASE)
    assert fetch(state, index, 10) == [0, 2, 4]
    assert state.state_of(1) == RecordState.ARCHIVED and state.state_of(3) == RecordState.ARCHIVED
    for offset in (0, 2, 4):
        settle(state, offset, AckType.ACCEPT)
    assert state.start_offset == 5 and not state.ranges


def test_cancelling_the_first_record_moves_the_start() -> None:
    state = SharePartition(10)
    state.cancel(10)
    assert (state.start_offset, state.next_offset, list(state.ranges)) == (11, 11, [])
    state.cancel(13)
    assert [(b.first, b.last, b.state, b.delivery_count) for b in state.state_batches()] == [
        (11, 12, RecordState.AVAILABLE, 0),
        (13, 13, RecordState.ARCHIVED, 0),
    ]


def test_cancelling_far_ahead_on_a_fifo_topic_keeps_the_locks_bounded() -> None:
    state = SharePartition(0)
    state.cancel(1000)
    acquired = state.acquire("m", 2000, 500, 100, 0, LOCK_MS)
    assert sum(a.last - a.first + 1 for a in acquired) == 100
    assert state.acquire("m", 2000, 500, 100, 0, LOCK_MS) == []


def test_a_delayed_release_waits_and_holds_nothing_back() -> None:
    state, index = indexed([1, 2, 3])
    assert fetch(state, index, 1) == [0]
    assert state.delay_release("m", 0, NOW_WALL + 500)
    assert not state.delay_release("someone-else", 0, NOW_WALL + 500)
    settle(state, 0, AckType.RELEASE)
    assert fetch(state, index, 10) == [1, 2]
    assert index.next_due_ms() == NOW_WALL + 500
    assert fetch(state, index, 10, now=NOW_WALL + 499) == []
    assert fetch(state, index, 10, now=NOW_WALL + 500) == [0]


def test_priorities_and_delays_survive_a_rebuild_and_done_ones_are_pruned() -> None:
    priorities = [1, 2, 3, 4, 5, 6]
    state, index = indexed(priorities)
    state.set_priority(5, -3)
    index.override(5, -3, None, NOW_WALL)
    state.set_priority(4, 100)
    index.override(4, 100, None, NOW_WALL)
    assert fetch(state, index, 2) == [5, 0]
    settle(state, 5, AckType.ACCEPT)  # its priority change is done with
    assert state.delay_release("m", 0, NOW_WALL + 1000)
    settle(state, 0, AckType.RELEASE)
    assert state.kept_priorities() == [(4, 100)]
    assert state.kept_delays() == [(0, NOW_WALL + 1000)]
    state2, index2 = rebuilt(state, priorities)
    assert fetch(state2, index2, 10) == [1, 2, 3, 4]
    assert fetch(state2, index2, 10, now=NOW_WALL + 1000) == [0]


def test_a_cancellation_survives_a_rebuild() -> None:
    priorities = [3, 2, 1]
    state, _index = indexed(priorities)
    state.cancel(2)
    state2, index2 = rebuilt(state, priorities)
    assert fetch(state2, index2, 10) == [1, 0]


def test_a_state_without_changes_is_encoded_as_before_and_old_records_decode() -> None:
    plain = PersistedState(3, 7, (StateBatch(7, 9, RecordState.ACKNOWLEDGED, 1),))
    assert json.loads(encode_state(plain)).keys() == {"state_epoch", "start_offset", "batches"}
    old = b'{"state_epoch": 3, "start_offset": 7, "batches": [[7, 9, 2, 1]]}'
    assert decode_state(old) == plain
    changed = PersistedState(3, 7, plain.batches, ((12, -4),), ((10, NOW_WALL),))
    assert decode_state(encode_state(changed)) == changed
