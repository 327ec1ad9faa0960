"""Which groups a broker coordinates: those of the `__consumer_offsets` partitions it leads.

Fake partitions stand in for the Raft-replicated ones (role, epoch, log, high watermark);
`TopicOffsetsLog` runs over them unchanged, and the coordinator follows them through its
leadership listener, on trio's mock clock.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from raftka.broker.config import BrokerConfig, TopicConfig, validate_topic_configs
from raftka.broker.groups import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinResult,
    MemoryOffsetsLog,
    Reply,
    SyncResult,
    TopicOffsetsLog,
)
from raftka.broker.groups.ownership import Ownership
from raftka.broker.groups.records import OffsetKey, OffsetValue, partition_for_group
from raftka.broker.groups.store import OFFSETS_TOPIC_CONFIGS
from raftka.consensus.core import NotLeaderError
from raftka.protocol.batch_builder import build_batch

E = ErrorCode
N = 3
CONFIG = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000)


def group_on(partition: int, prefix: str = "g") -> str:
    """A group id whose offsets partition is `partition`."""
    for i in range(10_000):
        group_id = f"{prefix}{i}"
        if partition_for_group(group_id, N) == partition:
            return group_id
    raise AssertionError("no group id found")


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


# -- fakes -------------------------------------------------------------------------------------


class FakeLog:
    """Batches at real offsets; `read` stops before a batch reaching `max_offset`."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base, next offset, bytes)
        self.log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1][1] if self.batches else 0

    def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        base = self.log_end_offset
        self.batches.append(
            (base, base + len(records), build_batch(records, 1000, base_offset=base))
        )
        return self.log_end_offset

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        return b"".join(
            data for base, end, data in self.batches if base >= offset and end <= max_offset
        )

    def should_flush(self, now: int) -> bool:
        return False


class FakePartition:
    """A `broker.topics.Partition` as the coordinator and `TopicOffsetsLog` use it."""

    def __init__(self, topic: Any, index: int) -> None:
        self.topic = topic
        self.index = index
        self.log = FakeLog()
        self.is_local = True  # hosted here, with a Raft group of its own
        self.is_leader = False
        self.leader_epoch = 0
        self.committed = 0
        self.commit_on_propose = True
        self.propose_error: BaseException | None = None
        # No Raft group to ask whether a batch committed at once: every answer waits.
        self.raft = None

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"

    @property
    def high_watermark(self) -> int:
        return min(self.committed, self.log.log_end_offset)

    def propose(self, batch: bytes, count: int) -> Any:
        if self.propose_error is not None:
            raise self.propose_error
        if not self.is_leader:
            raise NotLeaderError(None, f"{self.name}: not the leader")
        base = self.log.log_end_offset
        self.log.batches.append((base, base + count, bytes(batch)))
        if self.commit_on_propose:
            self.committed = self.log.log_end_offset
        return SimpleNamespace(end_offset=self.log.log_end_offset)

    async def wait_committed(self, entry: Any, timeout_s: float) -> bool:
        return await self.wait_high_watermark(entry.end_offset, timeout_s)

    async def wait_high_watermark(
        self, end_offset: int, timeout_s: float, epoch: int | None = None
    ) -> bool:
        epoch = self.leader_epoch
        with trio.move_on_after(timeout_s):
            while self.high_watermark < end_offset:
                if not self.is_leader or self.leader_epoch != epoch:
                    raise NotLeaderError(None, "leadership lost")
                await trio.sleep(0.01)
        return self.high_watermark >= end_offset


class NoController:
    """A controller client for a test in which nothing is created."""

    def live_brokers(self) -> list[int]:
        return [1]

    async def execute(self, command: object) -> object:
        raise AssertionError(f"unexpected controller command {command}")


class Cluster:
    """The offsets topic of one broker, whose leadership the test moves."""

    def __init__(self) -> None:
        config = BrokerConfig({"offsets.topic.num.partitions": str(N)}, environ={})
        # Made by the coordinator, so with the configs it checks an offsets topic has.
        topic_config = TopicConfig(config, validate_topic_configs(OFFSETS_TOPIC_CONFIGS))
        self.topic = SimpleNamespace(name=OFFSETS_TOPIC, partitions=[], config=topic_config)
        self.topic.partitions.extend(FakePartition(self.topic, i) for i in range(N))
        # The topic exists: the controller is never asked to create it.
        self.log = TopicOffsetsLog({OFFSETS_TOPIC: self.topic}, NoController(), config)
        self.coordinator = GroupCoordinator(self.log, CONFIG)

    def p(self, index: int) -> FakePartition:
        partition: FakePartition = self.topic.partitions[index]
        return partition

    def lead(self, index: int, epoch: int) -> None:
        partition = self.p(index)
        partition.is_leader = True
        partition.leader_epoch = epoch
        self.coordinator.on_partition_leadership(partition)

    def follow(self, index: int, epoch: int) -> None:
        partition = self.p(index)
        partition.is_leader = False
        partition.leader_epoch = epoch
        self.coordinator.on_partition_leadership(partition)


def run(
    test: Callable[[Cluster], Awaitable[None]],
    setup: Callable[[Cluster], None] = lambda cluster: None,
) -> None:
    async def main() -> None:
        cluster = Cluster()
        setup(cluster)
        cluster.coordinator.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cluster.coordinator.run)
            await test(cluster)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 600) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


def join(c: GroupCoordinator, group_id: str, member_id: str = "") -> JoinResult | Reply[JoinResult]:
    return c.join_group(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=[("range", subscription("t"))],
        require_known_member_id=False,
    )


def commit_record(group_id: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return (
        OffsetKey(group_id, "t", partition).encode(),
        OffsetValue(offset, -1, "", 1000).encode(),
    )


async def every_api_error(c: GroupCoordinator, group_id: str) -> set[ErrorCode]:
    """The error of each group API for `group_id` (all of them should agree)."""
    joined = join(c, group_id)
    assert isinstance(joined, JoinResult)
    synced = c.sync_group(
        group_id=group_id,
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
        assignments={},
    )
    assert isinstance(synced, SyncResult)
    errors = {
        joined.error,
        synced.error,
        c.heartbeat(group_id, 1, "m", None),
        c.leave_group(group_id, [("m", None)])[0],
        await c.commit_offsets(group_id, -1, "", None, offsets(p0=1)),
        c.fetch_offsets(group_id, None)[0],
        c.describe_group(group_id)[0],
        (await c.delete_groups([group_id]))[group_id],
        (await c.delete_offsets(group_id, [("t", 0)]))[0],
    }
    return errors


# -- tests -------------------------------------------------------------------------------------


def test_groups_of_partitions_not_led_get_not_coordinator() -> None:
    mine, theirs = group_on(0), group_on(1)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        await wait_for(lambda: 0 in c.owned)
        assert c.owned == {0: 4}
        assert await every_api_error(c, theirs) == {E.not_coordinator}
        assert await c.commit_offsets(mine, -1, "", None, offsets(p0=5)) == E.none
        assert c.list_groups() == [(mine, "", "Empty")]
        # Nothing was written for the unowned group.
        assert cl.p(1).log.batches == []

    def already_leader(cl: Cluster) -> None:
        # Led before the coordinator starts (a single-node broker): load() picks it up.
        cl.p(0).is_leader = True
        cl.p(0).leader_epoch = 4

    run(body, already_leader)


def test_leadership_loads_the_partition_once_its_log_is_committed() -> None:
    group_id = group_on(2)
    other = group_on(2, "other")

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        p = cl.p(2)
        # A previous leader's records: the last batch is not committed yet.
        p.log.append([commit_record(group_id, 0, 10)])
        p.committed = p.log.append([commit_record(other, 0, 3)])
        p.log.append([commit_record(group_id, 0, 11), commit_record(group_id, 1, 20)])
        assert [v for _, v in cl.log.replay(2)] and len(list(cl.log.replay(2))) == 2

        cl.lead(2, 7)
        assert c.loading == {2: 7}
        assert await every_api_error(c, group_id) == {E.coordinator_load_in_progress}
        await trio.sleep(5)
        assert c.loading == {2: 7} and c.groups == {}
        # The new leader's term commits the whole log.
        p.committed = p.log.log_end_offset
        await wait_for(lambda: 2 in c.owned)
        assert c.owned == {2: 7} and not c.is_loading()
        error, fetched = c.fetch_offsets(group_id, None)
        assert error == E.none
        assert {tp: v.offset for tp, v in fetched.items() if v} == {("t", 0): 11, ("t", 1): 20}
        assert c.fetch_offsets(other, [("t", 0)])[1][("t", 0)].offset == 3  # type: ignore[union-attr]
        # Served from now on, and writes go through the partition.
        assert await c.commit_offsets(group_id, -1, "", None, offsets(p0=12)) == E.none
        assert p.high_watermark == p.log.log_end_offset == 5

    run(body)


def test_losing_leadership_while_loading_leaves_the_partition_unowned() -> None:
    group_id = group_on(1)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        p = cl.p(1)
        p.log.append([commit_record(group_id, 0, 1)])
        cl.lead(1, 2)
        assert c.loading == {1: 2}
        cl.follow(1, 3)
        assert c.loading == {} and c.owned == {}
        p.committed = p.log.log_end_offset
        await trio.sleep(5)
        assert c.owned == {} and c.groups == {}
        assert await every_api_error(c, group_id) == {E.not_coordinator}

    run(body)


def test_losing_leadership_drops_the_groups_and_answers_waiting_members() -> None:
    group_id = group_on(0)
    kept = group_on(1)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        cl.lead(0, 1)
        cl.lead(1, 1)
        await wait_for(lambda: c.owned == {0: 1, 1: 1})
        first = join(c, group_id)
        assert isinstance(first, Reply)
        await wait_for(lambda: first.is_set)
        member = first.value.member_id  # type: ignore[union-attr]
        generation = first.value.generation_id  # type: ignore[union-attr]
        synced = c.sync_group(
            group_id=group_id,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
            protocol_type=None,
            protocol_name=None,
            assignments={member: b"a"},
        )
        assert isinstance(synced, Reply)
        await wait_for(lambda: c.groups[group_id].state == GroupState.STABLE)
        assert await c.commit_offsets(kept, -1, "", None, offsets(p0=1)) == E.none
        # A second member makes the group rebalance: the first waits in JoinGroup.
        second = join(c, group_id)
        assert isinstance(second, Reply)
        await trio.sleep(0.1)
        assert not second.is_set

        cl.follow(0, 2)
        assert group_id not in c.groups and kept in c.groups
        assert second.is_set
        assert second.value.error == E.not_coordinator  # type: ignore[union-attr]
        assert c.heartbeat(group_id, generation, member, None) == E.not_coordinator
        assert c.list_groups() == [(kept, "", "Empty")]
        # Timers and expiry leave the lost partition alone.
        before = list(cl.p(0).log.batches)
        await trio.sleep(120)
        await c.expire_offsets()
        assert cl.p(0).log.batches == before

        # Regaining it loads the group back from the log.
        cl.lead(0, 3)
        await wait_for(lambda: 0 in c.owned)
        restored = c.groups[group_id]
        assert restored.generation_id == generation
        assert list(restored.members) == [member]

    run(body)


def test_a_missed_leadership_change_is_noticed_on_the_next_request() -> None:
    group_id = group_on(2)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        cl.lead(2, 1)
        await wait_for(lambda: 2 in c.owned)
        assert await c.commit_offsets(group_id, -1, "", None, offsets(p0=1)) == E.none
        cl.p(2).is_leader = False  # no listener call
        assert c.fetch_offsets(group_id, None)[0] == E.not_coordinator
        assert c.owned == {} and group_id not in c.groups

    run(body)


def test_failed_writes_answer_not_coordinator() -> None:
    group_id = group_on(0)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        p = cl.p(0)
        cl.lead(0, 1)
        await wait_for(lambda: 0 in c.owned)
        # The Raft group refuses the proposal (leadership is being handed over).
        p.propose_error = NotLeaderError(2, "transferring leadership")
        assert await c.commit_offsets(group_id, -1, "", None, offsets(p0=1)) == E.not_coordinator
        assert c.fetch_offsets(group_id, [("t", 0)])[1][("t", 0)] is None
        p.propose_error = None
        # The proposal never commits.
        p.commit_on_propose = False
        started = trio.current_time()
        assert await c.commit_offsets(group_id, -1, "", None, offsets(p0=2)) == E.not_coordinator
        assert trio.current_time() - started >= 10
        assert c.fetch_offsets(group_id, [("t", 0)])[1][("t", 0)] is None
        # Leadership lost while waiting for the commit.
        p.commit_on_propose = False
        pending = {}

        async def commit() -> None:
            pending["error"] = await c.commit_offsets(group_id, -1, "", None, offsets(p0=3))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit)
            await trio.sleep(1)
            p.leader_epoch = 2
        assert pending["error"] == E.not_coordinator

    run(body)


def test_other_topics_and_repeated_notifications_are_ignored() -> None:
    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        other = FakePartition(SimpleNamespace(name="t"), 0)
        other.is_leader = True
        c.on_partition_leadership(other)
        assert c.loading == {} and c.owned == {}
        cl.lead(0, 1)
        await wait_for(lambda: 0 in c.owned)
        cl.lead(0, 1)  # same term: nothing to reload
        assert c.loading == {} and c.owned == {0: 1}

    run(body)


def test_memory_log_only_serves_the_partitions_it_leads() -> None:
    store = MemoryOffsetsLog(num_partitions=N)
    store.epochs = {0: 1}
    store.caught_up[0] = trio.Event()

    async def main() -> None:
        c = GroupCoordinator(store, CONFIG)
        assert c.load() == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            assert c.fetch_offsets(group_on(0), None)[0] == E.coordinator_load_in_progress
            assert c.fetch_offsets(group_on(1), None)[0] == E.not_coordinator
            store.caught_up[0].set()
            await wait_for(lambda: 0 in c.owned)
            assert c.fetch_offsets(group_on(0), None)[0] == E.none
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_assignment_is_given_once_stored_and_a_failed_store_answers_not_coordinator() -> None:
    group_id = group_on(1)

    async def body(cl: Cluster) -> None:
        c = cl.coordinator
        p = cl.p(1)
        cl.lead(1, 1)
        await wait_for(lambda: 1 in c.owned)

        async def stable_attempt() -> tuple[Reply[SyncResult], str]:
            joined = join(c, group_id)
            assert isinstance(joined, Reply)
            await wait_for(lambda: joined.is_set)
            result = joined.value
            assert result is not None and result.error == E.none
            synced = c.sync_group(
                group_id=group_id,
                generation_id=result.generation_id,
                member_id=result.member_id,
                group_instance_id=None,
                protocol_type=None,
                protocol_name=None,
                assignments={result.member_id: b"a"},
            )
            assert isinstance(synced, Reply)
            return synced, result.member_id

        # The store is refused: no assignment, the group rebalances.
        p.propose_error = NotLeaderError(2, "transferring leadership")
        synced, member = await stable_attempt()
        assert not synced.is_set
        assert c.groups[group_id].state == GroupState.COMPLETING_REBALANCE
        await wait_for(lambda: synced.is_set)
        assert synced.value == SyncResult(E.not_coordinator)
        assert c.groups[group_id].state == GroupState.PREPARING_REBALANCE
        assert c.groups[group_id].members[member].assignment == b""
        # Once stores commit, the rejoined member gets its assignment.
        p.propose_error = None
        rejoined = join(c, group_id, member)
        assert isinstance(rejoined, Reply)
        await wait_for(lambda: rejoined.is_set)
        result = rejoined.value
        assert result is not None and result.error == E.none
        synced = c.sync_group(
            group_id=group_id,
            generation_id=result.generation_id,
            member_id=member,
            group_instance_id=None,
            protocol_type=None,
            protocol_name=None,
            assignments={member: b"b"},
        )
        assert isinstance(synced, Reply)
        await wait_for(lambda: synced.is_set)
        assert synced.value is not None and synced.value.assignment == b"b"
        assert c.groups[group_id].state == GroupState.STABLE

    run(body)


class _LoadsThatNeverFinish:
    """An offsets log whose partitions never catch up: every load waits until cancelled."""

    num_partitions = N

    async def wait_caught_up(self, partition: int, epoch: int) -> bool:
        await trio.sleep_forever()
        return False


def test_leadership_arriving_while_the_loads_stop_is_not_an_error() -> None:
    """A `__consumer_offsets` leadership change while the broker stops (its loads cancelled,
    their nursery closing) starts nothing and raises nothing: trio refuses a task in a
    nursery that has closed, and the change is heard in the gap before `run` returns."""

    async def one_stop() -> None:
        ownership = Ownership(_LoadsThatNeverFinish(), SimpleNamespace(groups={}), now=lambda: 0)
        epoch = iter(range(1, 100))
        stopped = trio.Event()

        async def serve(scope: trio.CancelScope) -> None:
            with scope:
                await ownership.run()
            stopped.set()

        async def elect_until_stopped() -> None:
            # A new term at every scheduling step, a few times: each starts a load that keeps
            # the nursery open a step longer, and the last lands after it closed.
            for _ in range(8):
                if stopped.is_set():
                    return
                ownership.become_leader(1, next(epoch))
                await trio.lowlevel.checkpoint()

        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, scope)
            ownership.become_leader(0, next(epoch))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(elect_until_stopped)
            scope.cancel()

    async def main() -> None:
        for _ in range(50):  # trio orders each step's tasks at random: many stops
            await one_stop()

    trio.run(main)
