"""Share-group administration state: departures, notices to the partition leaders, group
deletion, and the tombstones of the in-memory store."""

from __future__ import annotations

import uuid

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.share.group import ShareGroups
from raftka.broker.share.manager import (
    MemoryStateStore,
    Notice,
    PersistedState,
    SharePartitionManager,
)
from raftka.broker.share.partition import RecordState

TOPIC_ID = uuid.UUID(int=7)


def _join(groups: ShareGroups, member: str, now_ms: float = 0.0) -> None:
    result = groups.heartbeat(
        group_id="g",
        member_id=member,
        member_epoch=0,
        rack_id=None,
        subscribed=("t",),
        client_id="c",
        client_host="h",
        now_ms=now_ms,
        session_timeout_ms=1000,
    )
    assert result.error == ErrorCode.none


def test_timed_out_members_are_reported_once_and_leaving_ones_not() -> None:
    """A member that leaves keeps its share sessions (its last acknowledgements may come
    after the leave); one that timed out has them ended by its partitions' leaders."""
    groups = ShareGroups(lambda: {"t": 2})
    _join(groups, "a")
    _join(groups, "b", now_ms=500)
    left = groups.heartbeat(
        group_id="g",
        member_id="a",
        member_epoch=-1,
        rack_id=None,
        subscribed=None,
        client_id="c",
        client_host="h",
        now_ms=600,
        session_timeout_ms=1000,
    )
    assert left.error == ErrorCode.none
    assert groups.take_departed() == []
    groups.expire_all(2000)
    assert groups.take_departed() == [("g", "b")]
    assert groups.take_departed() == []


def test_only_an_empty_share_group_is_deleted() -> None:
    groups = ShareGroups(lambda: {"t": 1})
    assert groups.delete("g") == ErrorCode.group_id_not_found
    _join(groups, "a")
    assert groups.delete("g") == ErrorCode.non_empty_group
    groups.expire_all(5000)
    assert groups.delete("g") == ErrorCode.none
    assert "g" not in groups.groups


def test_a_timed_out_member_notice_releases_its_records_at_once() -> None:
    async def main() -> None:
        manager = SharePartitionManager(MemoryStateStore())
        led = await manager.get(("g", TOPIC_ID, 0), 1, 0, 10, "earliest")
        manager.open_session("g", "a", {(TOPIC_ID, 0)}, 5, 10)
        acquired = led.state.acquire("a", 10, 10, 100, 0.0, 60_000)
        assert sum(r.last - r.first + 1 for r in acquired) == 10
        await manager.store.tell_brokers(Notice("g", "a", delivery_limit=5))
        assert ("g", "a") not in manager.sessions
        assert led.state.counts()[RecordState.AVAILABLE] == 10
        assert led.state.next_available() == 0

    trio.run(main)


def test_a_state_notice_drops_the_groups_share_partitions_so_they_reload() -> None:
    async def main() -> None:
        store = MemoryStateStore()
        manager = SharePartitionManager(store)
        await manager.get(("g", TOPIC_ID, 0), 1, 0, 10, "earliest")
        other = await manager.get(("h", TOPIC_ID, 0), 1, 0, 10, "earliest")
        await store.write(("g", TOPIC_ID, 0), PersistedState(5, 7, ()))
        await store.tell_brokers(Notice("g", topic_ids=(str(TOPIC_ID),)))
        assert ("g", TOPIC_ID, 0) not in manager.partitions
        assert manager.partitions[("h", TOPIC_ID, 0)] is other
        reloaded = await manager.get(("g", TOPIC_ID, 0), 1, 0, 10, "earliest")
        assert reloaded.state.start_offset == 7
        assert reloaded.state_epoch == 6
        await store.delete(("g", TOPIC_ID, 0))
        await store.tell_brokers(Notice("g"))
        fresh = await manager.get(("g", TOPIC_ID, 0), 1, 0, 10, "latest")
        assert fresh.state.start_offset == 10

    trio.run(main)


def test_notices_survive_their_encoding() -> None:
    for notice in (Notice("g", "m", None, 5), Notice("g", "", ("a", "b"), 0)):
        assert Notice.decode(notice.encode()) == notice
