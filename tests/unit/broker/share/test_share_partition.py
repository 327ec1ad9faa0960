"""SharePartition: acquisition by offset ranges, acknowledgements splitting them, lock expiry,
the delivery-count limit and the start offset moving past finished records."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from raftka.broker.share.group import ShareGroups, assign
from raftka.broker.share.manager import LedSharePartition, MemoryStateStore, SharePartitionManager
from raftka.broker.share.partition import (
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    StateBatch,
)

LOCK_MS = 1000
LIMIT = 3


def acquire(sp: SharePartition, member: str, stop: int, n: int = 1000, now: float = 0) -> list:
    return sp.acquire(member, stop, n, 2000, now, LOCK_MS)


def test_acquire_takes_new_records_as_one_range_up_to_max_records() -> None:
    sp = SharePartition(0)
    assert acquire(sp, "a", 100, n=30) == [Acquired(0, 29, 1)]
    assert acquire(sp, "b", 100, n=30) == [Acquired(30, 59, 1)]
    assert sp.next_offset == 60 and len(sp.ranges) == 2


def test_in_flight_limit_bounds_new_acquisitions() -> None:
    sp = SharePartition(0)
    assert sp.acquire("a", 100, 1000, 10, 0, LOCK_MS) == [Acquired(0, 9, 1)]
    assert sp.acquire("a", 100, 1000, 10, 0, LOCK_MS) == []


def test_accept_part_of_a_range_splits_it_and_moves_the_start() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 10)
    assert sp.acknowledge("a", 0, 3, [AckType.ACCEPT], LIMIT) == ErrorCode.none
    assert sp.start_offset == 4
    assert [(r.first, r.last, r.state) for r in sp.ranges] == [(4, 9, RecordState.ACQUIRED)]


def test_per_offset_types_release_and_reject() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 4)
    types = [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.ACCEPT]
    assert sp.acknowledge("a", 0, 3, types, LIMIT) == ErrorCode.none
    assert sp.start_offset == 1
    assert acquire(sp, "b", 4) == [Acquired(1, 1, 2)]


def test_only_the_holder_may_acknowledge() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 5)
    assert sp.acknowledge("b", 0, 4, [AckType.ACCEPT], LIMIT) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 9, [AckType.ACCEPT], LIMIT) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 4, [9], LIMIT) == ErrorCode.invalid_request
    assert sp.acknowledge("a", 0, 4, [1, 1], LIMIT) == ErrorCode.invalid_request
    assert sp.start_offset == 0 and sp.counts()[RecordState.ACQUIRED] == 5


def test_expired_locks_release_and_the_limit_archives() -> None:
    sp = SharePartition(0)
    for delivery in range(1, LIMIT + 1):
        assert acquire(sp, "a", 2, now=delivery * 10_000) == [Acquired(0, 1, delivery)]
        assert sp.release_expired(delivery * 10_000 + LOCK_MS - 1, LIMIT) == 0
        assert sp.release_expired(delivery * 10_000 + LOCK_MS, LIMIT) == 2
    assert sp.start_offset == 2 and not sp.ranges
    assert acquire(sp, "a", 2) == []


def test_release_member_frees_only_its_records() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 5, n=5)
    acquire(sp, "b", 10, n=5)
    assert sp.release_member("a", LIMIT) == 5
    assert acquire(sp, "c", 10) == [Acquired(0, 4, 2)]


def test_state_batches_round_trip_acquired_as_available() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 10)
    sp.acknowledge("a", 2, 3, [AckType.ACCEPT], LIMIT)
    batches = sp.state_batches()
    assert batches == [
        StateBatch(0, 1, RecordState.AVAILABLE, 1),
        StateBatch(2, 3, RecordState.ACKNOWLEDGED, 1),
        StateBatch(4, 9, RecordState.AVAILABLE, 1),
    ]
    again = SharePartition(sp.start_offset, batches)
    assert again.next_offset == 10
    assert acquire(again, "b", 20) == [Acquired(0, 1, 2), Acquired(4, 9, 2), Acquired(10, 19, 1)]


def test_move_start_drops_records_below_the_log_start() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 10)
    sp.move_start(5)
    assert sp.start_offset == 5 and list(sp.ranges)[0].first == 5


def test_assign_spreads_partitions_or_shares_them() -> None:
    few = assign({"m1": ("t",), "m2": ("t",)}, {"t": 4})
    assert few == {"m1": {"t": (0, 2)}, "m2": {"t": (1, 3)}}
    many = assign({f"m{i}": ("t",) for i in range(3)}, {"t": 2})
    assert [many[f"m{i}"]["t"] for i in range(3)] == [(0,), (1,), (0,)]


def test_heartbeat_join_fence_and_leave() -> None:
    groups = ShareGroups(lambda: {"t": 2})

    def beat(member: str, epoch: int, now: float = 0, subscribed: tuple[str, ...] | None = ("t",)):
        return groups.heartbeat(
            group_id="g",
            member_id=member,
            member_epoch=epoch,
            rack_id=None,
            subscribed=subscribed,
            client_id="c",
            client_host="h",
            now_ms=now,
            session_timeout_ms=1000,
        )

    joined = beat("a", 0)
    assert joined.error == ErrorCode.none and joined.assignment == {"t": (0, 1)}
    assert beat("a", joined.member_epoch + 1).error == ErrorCode.fenced_member_epoch
    assert beat("x", 5).error == ErrorCode.unknown_member_id
    second = beat("b", 0, now=10)
    assert second.assignment == {"t": (1,)}
    again = beat("a", joined.member_epoch, now=20, subscribed=None)
    assert again.assignment == {"t": (0,)} and again.member_epoch == second.member_epoch
    # b's session ends: a gets both partitions back.
    alone = beat("a", again.member_epoch, now=1015, subscribed=None)
    assert alone.assignment == {"t": (0, 1)}
    # b timed out: its partitions' leaders are told to end its share sessions. a leaves:
    # its client may still send its final acknowledgements, so its sessions stay.
    assert groups.take_departed() == [("g", "b")]
    assert beat("a", -1, now=1020).member_epoch == -1
    assert not groups.groups["g"].members
    assert groups.take_departed() == []


def manager_leading(sp: SharePartition) -> tuple[SharePartitionManager, uuid.UUID]:
    """A share-partition manager leading `sp` as partition 0 of a topic, for group g."""
    topic_id = uuid.uuid4()
    manager = SharePartitionManager(MemoryStateStore())
    manager.partitions[("g", topic_id, 0)] = LedSharePartition(("g", topic_id, 0), 1, sp, 0)
    return manager, topic_id


def test_idle_share_sessions_close_and_release_their_records() -> None:
    sp = SharePartition(0)
    manager, topic_id = manager_leading(sp)
    session = manager.open_session("g", "a", {(topic_id, 0)}, LIMIT, sessions_max=1)
    assert session is not None
    assert manager.open_session("g", "b", set(), LIMIT, sessions_max=1) is None
    acquire(sp, "a", 5)
    session.last_used_ms = 100
    manager.evict_idle(1099, 1000, LIMIT)
    assert ("g", "a") in manager.sessions
    manager.evict_idle(1100, 1000, LIMIT)
    assert not manager.sessions and sp.counts()[RecordState.AVAILABLE] == 5


def test_a_closed_connection_ends_the_share_sessions_it_opened_and_no_other() -> None:
    sp = SharePartition(0)
    manager, topic_id = manager_leading(sp)
    first, second, elsewhere = object(), object(), object()
    opened = [
        manager.open_session("g", member, {(topic_id, 0)}, LIMIT, 10, connection)
        for member, connection in (("a", first), ("b", first), ("c", elsewhere))
    ]
    assert None not in opened
    acquire(sp, "c", 3)
    # a opens its session again on another connection (a client reconnecting): the old
    # connection closing later does not end the new session.
    manager.open_session("g", "a", {(topic_id, 0)}, LIMIT, 10, second)
    acquire(sp, "a", 7)
    manager.connection_closed(first, LIMIT)
    assert set(manager.sessions) == {("g", "a"), ("g", "c")}
    assert sp.counts()[RecordState.ACQUIRED] == 7
    manager.connection_closed(second, LIMIT)
    assert set(manager.sessions) == {("g", "c")}
    assert sp.counts()[RecordState.ACQUIRED] == 3 and sp.counts()[RecordState.AVAILABLE] == 4
    # A session ended otherwise (its final epoch) is forgotten by its connection.
    manager.close_session("g", "c", LIMIT)
    manager.connection_closed(elsewhere, LIMIT)
    assert not manager.sessions and not manager._by_connection


def test_gap_archives_only_the_members_own_offsets() -> None:
    sp = SharePartition(0)
    acquire(sp, "a", 3, n=3)
    acquire(sp, "b", 6, n=3)
    assert sp.acknowledge("a", 3, 5, [AckType.GAP], LIMIT) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 2, [AckType.ACCEPT, AckType.GAP, AckType.ACCEPT], LIMIT) == (
        ErrorCode.none
    )
    assert sp.start_offset == 3 and sp.counts()[RecordState.ACQUIRED] == 3


def test_leadership_changes_forget_share_partitions_of_other_epochs() -> None:
    topic_id, other = uuid.uuid4(), uuid.uuid4()
    manager = SharePartitionManager(MemoryStateStore())
    for key in (("g", topic_id, 0), ("h", topic_id, 0), ("g", other, 0)):
        manager.partitions[key] = LedSharePartition(key, 3, SharePartition(0), 0)
    manager.on_leadership(topic_id, 0, 3)
    assert len(manager.partitions) == 3
    manager.on_leadership(topic_id, 0, None)
    assert list(manager.partitions) == [("g", other, 0)]


def test_a_release_put_aside_archives_at_the_limit_and_frees_the_rest_when_applied() -> None:
    sp = SharePartition(0)
    for _ in range(LIMIT - 1):  # offset 0 delivered and released LIMIT - 1 times
        acquire(sp, "a", 1)
        assert sp.acknowledge("a", 0, 0, [AckType.RELEASE], LIMIT) == ErrorCode.none
    taken = acquire(sp, "a", 3)  # offset 0 at its LIMIT-th delivery, 1-2 at their first
    assert [(a.first, a.last, a.delivery_count) for a in taken] == [(0, 0, LIMIT), (1, 2, 1)]
    releases: list[tuple[int, int, int]] = []
    assert sp.acknowledge("a", 0, 2, [AckType.RELEASE], LIMIT, releases) == ErrorCode.none
    assert releases == [(1, 2, 1)]  # offset 0 is archived, not put aside
    # At the limit: archived at once (that is persisted; the start moves past it); the
    # others wait for `release_held`, still held by a.
    assert sp.start_offset == 1
    assert [sp.state_of(o) for o in (1, 2)] == [RecordState.ACQUIRED] * 2
    assert acquire(sp, "b", 3) == []
    assert sp.release_held("a", releases, LIMIT) == 2
    assert [sp.state_of(o) for o in (1, 2)] == [RecordState.AVAILABLE] * 2
    assert sp.release_held("a", releases, LIMIT) == 0


def test_a_release_put_aside_leaves_the_members_next_acquisition_of_those_records_alone() -> None:
    # a RELEASEs 0-3; while that acknowledgement is being written, its lock expires and
    # a takes 0-1 again (their second delivery). Applying the release then frees 2-3 only:
    # 0-1 belong to the new delivery, which a may still acknowledge.
    sp = SharePartition(0)
    assert acquire(sp, "a", 4) == [Acquired(0, 3, 1)]
    releases: list[tuple[int, int, int]] = []
    assert sp.acknowledge("a", 0, 3, [AckType.RELEASE], LIMIT, releases) == ErrorCode.none
    assert sp.release_expired(LOCK_MS, LIMIT) == 4
    assert acquire(sp, "a", 4, n=2, now=LOCK_MS) == [Acquired(0, 1, 2)]
    assert acquire(sp, "a", 4, n=2, now=LOCK_MS) == [Acquired(2, 3, 2)]
    assert sp.acknowledge("a", 2, 3, [AckType.ACCEPT], LIMIT) == ErrorCode.none
    assert sp.release_held("a", releases, LIMIT) == 0
    assert [sp.state_of(o) for o in range(4)] == [RecordState.ACQUIRED] * 2 + [
        RecordState.ACKNOWLEDGED
    ] * 2
    assert sp.acknowledge("a", 0, 1, [AckType.ACCEPT], LIMIT) == ErrorCode.none
