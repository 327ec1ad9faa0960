"""The empty group id, as Kafka's coordinators treat it: OffsetCommit, OffsetFetch,
DescribeGroups and DeleteGroups accept it (clients without group management commit under
it); JoinGroup, SyncGroup, Heartbeat, LeaveGroup, TxnOffsetCommit and OffsetDelete answer
INVALID_GROUP_ID (GroupCoordinator.isValidGroupId, GroupCoordinatorService)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from test_groups import Harness, offsets, run

from raftka.broker.groups import GroupState, JoinResult, MemoryOffsetsLog, valid_group_id
from raftka.broker.groups.records import STRING_LENGTH_MAX, partition_for_group

E = ErrorCode


@pytest.mark.parametrize(
    ("group_id", "empty_allowed", "valid"),
    [
        ("g", False, True),
        ("", False, False),
        ("", True, True),
        (None, True, False),
        ("x" * STRING_LENGTH_MAX, False, True),
        ("x" * (STRING_LENGTH_MAX + 1), True, False),
        ("é" * (STRING_LENGTH_MAX // 2 + 1), True, False),  # counted in UTF-8 bytes
    ],
)
def test_valid_group_id(group_id: str | None, empty_allowed: bool, valid: bool) -> None:
    assert valid_group_id(group_id, empty_allowed=empty_allowed) is valid


def test_the_empty_group_commits_fetches_describes_and_deletes() -> None:
    async def body(h: Harness) -> None:
        c = h.c
        assert c.describe_group("")[1].state == GroupState.DEAD.value
        assert await c.delete_groups([""]) == {"": E.group_id_not_found}
        assert await c.commit_offsets("", -1, "", None, offsets(p0=7, p1=8)) == E.none
        error, fetched = c.fetch_offsets("", [("t", 0), ("t", 2)])
        assert error == E.none
        assert fetched[("t", 0)] is not None and fetched[("t", 0)].offset == 7
        assert fetched[("t", 2)] is None
        assert {tp: v.offset for tp, v in c.fetch_offsets("", None)[1].items() if v} == {
            ("t", 0): 7,
            ("t", 1): 8,
        }
        # Like any group that only stores offsets: Empty, without protocol or members.
        error, described = c.describe_group("")
        assert (error, described.state, described.protocol_type, described.members) == (
            E.none,
            GroupState.EMPTY.value,
            "",
            (),
        )
        # A member's commit to a group it is not in is still refused.
        assert await c.commit_offsets("", 3, "m", None, offsets(p0=9)) == E.unknown_member_id
        assert await c.delete_groups([""]) == {"": E.none}
        assert c.fetch_offsets("", None) == (E.none, {})

    run(body)


def test_the_empty_groups_offsets_survive_a_reload_from_partition_zero() -> None:
    store = MemoryOffsetsLog(num_partitions=7)

    async def first(h: Harness) -> None:
        assert await h.c.commit_offsets("", -1, "", None, offsets(p0=11)) == E.none

    async def second(h: Harness) -> None:
        error, fetched = h.c.fetch_offsets("", [("t", 0)])
        assert error == E.none
        assert fetched[("t", 0)] is not None and fetched[("t", 0)].offset == 11

    run(first, store)
    # Java's "".hashCode() is 0: the empty group lives in partition 0, as in Kafka.
    assert partition_for_group("", 7) == 0
    assert set(store.batches) == {0}
    run(second, store)


def test_group_management_refuses_the_empty_group_id() -> None:
    async def body(h: Harness) -> None:
        c = h.c
        joined = h.join_nowait(group="")
        assert isinstance(joined, JoinResult) and joined.error == E.invalid_group_id
        assert h.start_sync("m", 1, group="")["result"].error == E.invalid_group_id
        assert c.heartbeat("", 1, "m", None) == E.invalid_group_id
        assert c.leave_group("", [("m", None)]) == (E.invalid_group_id, [E.invalid_group_id])
        txn = await c.commit_transactional_offsets("", 1, 0, -1, "", None, offsets(p0=1))
        assert txn == E.invalid_group_id
        assert await c.commit_offsets("", -1, "", None, offsets(p0=4)) == E.none
        # OffsetDelete refuses it even when the empty group has offsets.
        assert (await c.delete_offsets("", [("t", 0)]))[0] == E.invalid_group_id
        assert c.fetch_offsets("", [("t", 0)])[1][("t", 0)] is not None
        assert "" in c.groups and c.groups[""].members == {}

    run(body)
