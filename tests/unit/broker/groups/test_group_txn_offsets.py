"""Transactional offset commits (TxnOffsetCommit, KIP-98 and KIP-447) in the group coordinator:
pending until the producer's COMMIT or ABORT marker, rebuilt from the log on loading.

The markers are written into `MemoryOffsetsLog` as the transaction coordinator would
(`write_marker`), and the coordinator is told as the partition leader would tell it
(`on_transaction_completed`).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing
from clocks import WallSetByTest
from kio.schema.errors import ErrorCode

from raftka.broker.groups import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinResult,
    MemoryOffsetsLog,
    Reply,
    SyncResult,
)
from raftka.broker.groups.records import OffsetKey, OffsetValue, partition_for_group
from raftka.broker.groups.store import (
    StoredRecord,
    TxnMarker,
    entries_of,
    marker_batch,
    offsets_batch,
)
from raftka.broker.replication import control_batch
from raftka.consensus.types import EntryKind
from raftka.protocol.records import read_batch_header

E = ErrorCode
N = 5
CONFIG = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000)
P1, P2 = 1001, 1002  # producer ids
EPOCH = 3


def offsets(**by_partition: int) -> dict[tuple[str, int], OffsetValue]:
    return {
        ("t", int(p.removeprefix("p"))): OffsetValue(o, -1, "", 1000)
        for p, o in by_partition.items()
    }


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def part(group_id: str) -> int:
    return partition_for_group(group_id, N)


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 600) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


class Harness:
    def __init__(self, coordinator: GroupCoordinator, log: MemoryOffsetsLog) -> None:
        self.c = coordinator
        self.log = log

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        committed: dict[tuple[str, int], OffsetValue],
        *,
        epoch: int = EPOCH,
        generation: int = -1,
        member: str = "",
        instance: str | None = None,
    ) -> ErrorCode:
        return await self.c.commit_transactional_offsets(
            group_id, producer_id, epoch, generation, member, instance, committed
        )

    def end_txn(self, group_id: str, producer_id: int, committed: bool) -> None:
        """The marker lands on the group's offsets partition; its leader tells the
        coordinator."""
        partition = part(group_id)
        self.log.write_marker(partition, producer_id, EPOCH, committed)
        self.c.on_transaction_completed(partition, producer_id, committed)

    def offset(self, group_id: str, partition: int = 0) -> int | None:
        error, fetched = self.c.fetch_offsets(group_id, [("t", partition)])
        assert error == E.none
        value = fetched[("t", partition)]
        return None if value is None else value.offset

    def unstable(self, group_id: str, *partitions: int) -> set[int]:
        return {p for _, p in self.c.unstable_offsets(group_id, [("t", p) for p in partitions])}

    async def stable_member(self, group_id: str, instance: str | None = None) -> tuple[str, int]:
        """One member joined and synced: (member id, generation)."""
        box: dict[str, Any] = {}

        async def resolve(outcome: Any) -> Any:
            return await outcome.wait() if isinstance(outcome, Reply) else outcome

        def join(member_id: str) -> JoinResult | Reply[JoinResult]:
            return self.c.join_group(
                group_id=group_id,
                member_id=member_id,
                group_instance_id=instance,
                client_id="client",
                client_host="/127.0.0.1",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=30_000,
                protocol_type="consumer",
                protocols=[("range", subscription("t"))],
                require_known_member_id=True,
            )

        result = await resolve(join(""))
        if result.error == E.member_id_required:
            result = await resolve(join(result.member_id))
        assert result.error == E.none, result
        box["join"] = result
        sync = await resolve(
            self.c.sync_group(
                group_id=group_id,
                generation_id=result.generation_id,
                member_id=result.member_id,
                group_instance_id=instance,
                protocol_type=None,
                protocol_name=None,
                assignments={result.member_id: b"a"},
            )
        )
        assert isinstance(sync, SyncResult) and sync.error == E.none
        assert self.c.groups[group_id].state == GroupState.STABLE
        return result.member_id, result.generation_id


def run(test: Callable[[Harness], Awaitable[None]], log: MemoryOffsetsLog | None = None) -> None:
    offsets_log = log or MemoryOffsetsLog(num_partitions=N)

    async def main() -> None:
        coordinator = GroupCoordinator(offsets_log, CONFIG)
        coordinator.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinator.run)
            await wait_for(lambda: not coordinator.is_loading())
            await test(Harness(coordinator, offsets_log))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- pending until the marker ------------------------------------------------------------------


def test_txn_offsets_are_invisible_until_the_commit_marker() -> None:
    async def body(h: Harness) -> None:
        assert await h.c.commit_offsets("g", -1, "", None, offsets(p0=5)) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=20)) == E.none
        assert h.offset("g", 0) == 5 and h.offset("g", 1) is None
        assert h.unstable("g", 0, 1, 2) == {0, 1}
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) == 10 and h.offset("g", 1) == 20
        assert h.unstable("g", 0, 1, 2) == set()

    run(body)


def test_abort_drops_txn_offsets_and_keeps_the_committed_one() -> None:
    async def body(h: Harness) -> None:
        assert await h.c.commit_offsets("g", -1, "", None, offsets(p0=5)) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=20)) == E.none
        h.end_txn("g", P1, committed=False)
        assert h.offset("g", 0) == 5 and h.offset("g", 1) is None
        assert h.unstable("g", 0, 1) == set()
        # A marker for a producer with nothing pending changes nothing.
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) == 5

    run(body)


def test_the_batch_is_transactional_and_carries_the_producer() -> None:
    log = MemoryOffsetsLog(num_partitions=N)

    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=20)) == E.none
        (batch,) = log.batches[part("g")]
        header = read_batch_header(batch)
        assert header.is_transactional and not header.is_control
        assert (header.producer_id, header.producer_epoch) == (P1, EPOCH)
        assert header.base_sequence == 0 and header.records_count == 2
        entries = list(log.replay_log(part("g")))
        assert [type(e) for e in entries] == [StoredRecord, StoredRecord]
        assert {e.producer_id for e in entries if isinstance(e, StoredRecord)} == {P1}
        h.end_txn("g", P1, committed=True)
        marker = list(log.replay_log(part("g")))[-1]
        assert marker == TxnMarker(2, P1, True)

    run(body, log)


def test_two_producers_pending_on_one_group() -> None:
    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10)) == E.none
        assert await h.txn_commit("g", P2, offsets(p1=21)) == E.none
        assert h.unstable("g", 0, 1) == {0, 1}
        h.end_txn("g", P2, committed=True)
        assert h.offset("g", 1) == 21 and h.offset("g", 0) is None
        assert h.unstable("g", 0, 1) == {0}
        h.end_txn("g", P1, committed=False)
        assert h.offset("g", 0) is None and h.unstable("g", 0, 1) == set()

    run(body)


def test_a_plain_commit_written_after_the_txn_offset_wins() -> None:
    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=11)) == E.none
        assert await h.c.commit_offsets("g", -1, "", None, offsets(p0=7)) == E.none
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) == 7  # written later than the transaction's record
        assert h.offset("g", 1) == 11

    run(body)


def test_a_later_txn_commit_of_the_same_producer_replaces_its_pending_offset() -> None:
    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10)) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=12)) == E.none
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) == 12

    run(body)


# -- validation --------------------------------------------------------------------------------


def test_member_and_generation_are_checked_when_given() -> None:
    async def body(h: Harness) -> None:
        member, generation = await h.stable_member("g", instance="i-1")
        ok = await h.txn_commit(
            "g", P1, offsets(p0=1), generation=generation, member=member, instance="i-1"
        )
        assert ok == E.none
        wrong_generation = await h.txn_commit(
            "g", P1, offsets(p0=2), generation=generation + 1, member=member
        )
        assert wrong_generation == E.illegal_generation
        unknown = await h.txn_commit("g", P1, offsets(p0=2), generation=generation, member="x")
        assert unknown == E.unknown_member_id
        fenced = await h.txn_commit(
            "g", P1, offsets(p0=2), generation=generation, member="other", instance="i-1"
        )
        assert fenced == E.fenced_instance_id
        unknown_instance = await h.txn_commit(
            "g", P1, offsets(p0=2), generation=generation, member=member, instance="i-9"
        )
        assert unknown_instance == E.unknown_member_id
        # v0-2 carry no member nor generation: accepted for a group with members.
        assert await h.txn_commit("g", P2, offsets(p1=3)) == E.none
        # No group yet: a generation names a member it cannot have (Kafka 3.9's answer).
        assert await h.txn_commit("new", P1, offsets(p0=1), generation=4) == E.unknown_member_id
        assert "new" not in h.c.groups
        assert await h.txn_commit("", P1, offsets(p0=1)) == E.invalid_group_id
        # Only the accepted commits are pending.
        assert h.c.pending.pending_of(P1, "g")[("t", 0)].value.offset == 1
        h.end_txn("g", P1, committed=True)
        h.end_txn("g", P2, committed=True)
        assert h.offset("g", 0) == 1 and h.offset("g", 1) == 3

    run(body)


def test_a_fenced_producer_epoch_is_refused_and_changes_nothing() -> None:
    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=1), epoch=EPOCH) == E.none
        stale = await h.txn_commit("g", P1, offsets(p0=2), epoch=EPOCH - 1)
        assert stale == E.invalid_producer_epoch
        assert h.c.pending.pending_of(P1, "g")[("t", 0)].value.offset == 1

    run(body)


def test_not_coordinator_and_failed_appends() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    log.epochs = {p: 0 for p in range(N) if p != part("elsewhere")}

    async def body(h: Harness) -> None:
        assert await h.txn_commit("elsewhere", P1, offsets(p0=1)) == E.not_coordinator
        log.fail_appends = True
        assert await h.txn_commit("g", P1, offsets(p0=1)) == E.coordinator_not_available
        assert not h.c.pending.has_open("g")

    run(body, log)


# -- loading from the log ----------------------------------------------------------------------


def test_replay_keeps_exactly_the_committed_transactions() -> None:
    log = MemoryOffsetsLog(num_partitions=N)
    producer_3 = 1003

    async def first(h: Harness) -> None:
        assert await h.c.commit_offsets("g", -1, "", None, offsets(p0=5, p3=30)) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=11)) == E.none
        assert await h.txn_commit("g", P2, offsets(p0=20, p2=22)) == E.none
        assert await h.txn_commit("g", producer_3, offsets(p3=33)) == E.none
        assert await h.txn_commit("solo", producer_3, offsets(p0=1)) == E.none
        h.end_txn("g", P1, committed=True)
        h.end_txn("g", P2, committed=False)
        # producer 3 is still open when the coordinator moves.

    async def second(h: Harness) -> None:
        assert h.offset("g", 0) == 10 and h.offset("g", 1) == 11
        assert h.offset("g", 2) is None and h.offset("g", 3) == 30
        assert h.unstable("g", 0, 1, 2, 3) == {3}
        # The group that only has an open transaction's offsets is loaded too.
        assert "solo" in h.c.groups and h.unstable("solo", 0) == {0}
        h.end_txn("g", producer_3, committed=True)
        assert h.offset("g", 3) == 33

    async def third(h: Harness) -> None:
        assert h.offset("g", 3) == 33 and h.unstable("g", 3) == set()

    run(first, log)
    run(second, log)
    run(third, log)


def test_replay_of_a_tombstone_drops_pending_offsets_written_before_it() -> None:
    log = MemoryOffsetsLog(num_partitions=N)

    async def first(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10, p1=11)) == E.none
        error, results = await h.c.delete_offsets("g", [("t", 0)])
        assert error == E.none and results == {("t", 0): E.none}
        assert h.unstable("g", 0, 1) == {1}

    async def second(h: Harness) -> None:
        assert h.unstable("g", 0, 1) == {1}
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) is None and h.offset("g", 1) == 11

    run(first, log)
    run(second, log)


def test_losing_the_partition_forgets_its_pending_offsets() -> None:
    log = MemoryOffsetsLog(num_partitions=N)

    async def body(h: Harness) -> None:
        assert await h.txn_commit("g", P1, offsets(p0=10)) == E.none
        h.c.ownership.resign(part("g"))
        assert not h.c.pending.has_open("g")
        # The leader that took over tells its own coordinator; this one ignores it.
        h.c.on_transaction_completed(part("g"), P1, True)
        assert "g" not in h.c.groups

    run(body, log)


# -- expiry and deletion -----------------------------------------------------------------------


def test_expiry_spares_partitions_and_groups_with_open_transactions() -> None:
    now = {"ms": 1_000_000}

    async def body(h: Harness) -> None:
        h.c.clock = WallSetByTest(lambda: now["ms"])
        old = {tp: OffsetValue(v.offset, -1, "", now["ms"]) for tp, v in offsets(p0=1).items()}
        assert await h.c.commit_offsets("g", -1, "", None, old) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=2)) == E.none
        assert await h.txn_commit("only-txn", P1, offsets(p0=3)) == E.none
        now["ms"] += CONFIG.offsets_retention_ms + 1
        assert await h.c.expire_offsets() == 0
        assert h.offset("g", 0) == 1 and "only-txn" in h.c.groups
        h.end_txn("g", P1, committed=False)
        h.end_txn("only-txn", P1, committed=False)
        assert await h.c.expire_offsets() == 1
        await trio.sleep(0.01)
        assert "g" not in h.c.groups and "only-txn" not in h.c.groups

    run(body)


def test_delete_groups_tombstones_pending_offsets_too() -> None:
    log = MemoryOffsetsLog(num_partitions=N)

    async def first(h: Harness) -> None:
        assert await h.c.commit_offsets("g", -1, "", None, offsets(p0=1)) == E.none
        assert await h.txn_commit("g", P1, offsets(p0=2, p1=3)) == E.none
        assert await h.c.delete_groups(["g"]) == {"g": E.none}
        assert not h.c.pending.has_open("g")
        tombstoned = {
            OffsetKey("g", "t", 0).encode(),
            OffsetKey("g", "t", 1).encode(),
        }
        last = list(log.replay(part("g")))[-3:]
        assert {k for k, v in last if v is None} >= tombstoned
        # The transaction's commit after the deletion brings nothing back.
        h.end_txn("g", P1, committed=True)
        assert h.offset("g", 0) is None and h.offset("g", 1) is None

    async def second(h: Harness) -> None:
        assert "g" not in h.c.groups or not h.c.groups["g"].offsets

    run(first, log)
    run(second, log)


def test_log_entries_skip_raft_control_batches_and_keep_markers() -> None:
    key = OffsetKey("g", "t", 0).encode()
    value = OffsetValue(1, -1, "", 0).encode()
    log = b"".join(
        [
            control_batch(EntryKind.NOOP, b""),
            offsets_batch([(key, value)], 0, base_offset=1),
            offsets_batch([(key, value)], 0, base_offset=2, producer_id=P1, producer_epoch=0),
            marker_batch(P1, 0, False, 0, base_offset=3),
        ]
    )
    assert list(entries_of(log)) == [
        StoredRecord(1, -1, key, value),
        StoredRecord(2, P1, key, value),
        TxnMarker(3, P1, False),
    ]
