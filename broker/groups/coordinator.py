"""The classic consumer-group coordinator: Kafka's GroupCoordinator, composed of its parts.

- `Ownership` (ownership.py): which groups this broker coordinates -- those of the
  `__consumer_offsets` partitions it leads -- and their loading from the log;
- `RebalanceMachine` (rebalance.py): JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
  deadlines of members and groups, as a state machine that is given the time;
- `GroupOffsets` (offsets.py): OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete and
  offset expiry; `PendingTxnOffsets` (txn_offsets.py): the offsets of open transactions;
- `WriteQueue` (writes.py): the bounded, ordered appends to `__consumer_offsets`.

This module supplies what the parts need from trio: the time (`Instant`, from the injected
`Clock`: the loop's clock, so `trio.testing.MockClock` drives timeouts in tests, and the wall
clock),
a `Reply` for the JoinGroup and SyncGroup answers that wait for the group, and `run`, which
runs the loads, the writers, one timer for the machine's deadlines and the offset expiry.
It also answers ListGroups, DescribeGroups and DeleteGroups.

Groups of the consumer group protocol (KIP-848) share the registry, the offsets and the
ownership with classic groups; `ConsumerProtocolMachine` (consumer_group.py) runs their
heartbeats and deadlines; the records of a heartbeat's changes (Kafka's ConsumerGroupMetadata,
member metadata and current assignment) are in the log before it is answered.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.clock import SYSTEM_CLOCK, Clock
from raftka.broker.groups.assignors import assignors_named
from raftka.broker.groups.config import CoordinatorConfig
from raftka.broker.groups.consumer_group import (
    GROUP_TYPE_CONSUMER,
    ConsumerConfig,
    ConsumerProtocolGroup,
    ConsumerProtocolMachine,
    HeartbeatRequest,
    HeartbeatResult,
    TopicImage,
)
from raftka.broker.groups.group import (
    ConsumerGroup,
    GroupState,
    JoinResult,
    SyncResult,
    valid_group_id,
)
from raftka.broker.groups.instant import Instant
from raftka.broker.groups.offsets import GroupOffsets, TopicPartition
from raftka.broker.groups.ownership import Ownership, materialize
from raftka.broker.groups.rebalance import JoinRequest, RebalanceMachine, SyncRequest
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetKey,
    OffsetValue,
)
from raftka.broker.groups.store import KeyValue, OffsetsLog
from raftka.broker.groups.txn_offsets import PendingTxnOffsets
from raftka.broker.groups.writes import Append, WriteQueue
from raftka.broker.share.group import ShareGroups
from raftka.broker.share.manager import MemoryStateStore, SharePartitionManager

if TYPE_CHECKING:
    from raftka.broker.topics import Partition

logger = logging.getLogger("raftka.groups")

GROUP_TYPE_CLASSIC = "classic"

T = TypeVar("T")


class Reply(Generic[T]):
    """An answer that is decided later (JoinGroup and SyncGroup wait for the group); only
    the first `set` counts."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.value: T | None = None

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self.value = value
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        if self.value is None:
            raise RuntimeError("a reply was set without a value")
        return self.value


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]


class NoTopics:
    """A `TopicImage` without topics (a coordinator built without one)."""

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        return None

    def names(self) -> Iterable[str]:
        return ()

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return None


class GroupCoordinator:
    def __init__(
        self,
        offsets_log: OffsetsLog,
        config: CoordinatorConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        topics: TopicImage | None = None,
    ) -> None:
        self.offsets_log = offsets_log
        self.config = config or CoordinatorConfig()
        self.clock = clock
        self.machine = RebalanceMachine(
            self.config,
            store_group=self._store_group,
            store_assignment=self._store_assignment,
            on_earlier_deadline=self._on_earlier_deadline,
        )
        self.writes = WriteQueue(offsets_log)
        self.pending = PendingTxnOffsets(self.writes.partition_for)
        self.ownership = Ownership(offsets_log, self.machine, self.now, self.pending)
        self.ownership.on_adopt.append(lambda group: self.consumer.adopt(group, self.now()))
        self.offsets = GroupOffsets(
            self.config, self.machine, self.ownership, self.writes, self.now
        )
        self.consumer = ConsumerProtocolMachine(
            ConsumerConfig(
                heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms,
                session_timeout_ms=self.config.consumer_session_timeout_ms,
                max_size=self.config.consumer_max_size,
                assignors=assignors_named(list(self.config.consumer_assignors)),
            ),
            self.machine.groups,
            topics or NoTopics(),
            on_earlier_deadline=self._on_earlier_deadline,
            on_records=self._store_consumer_records,
        )
        self._earlier_deadline = trio.Event()
        # The appends of the heartbeat being handled, which it waits for.
        self._heartbeat_appends: list[Append] | None = None
        # Share groups (KIP-932): members here, share-partitions where their data is led.
        self.share = ShareGroups(dict)
        self.share_partitions = SharePartitionManager(MemoryStateStore())

    def is_classic_group(self, group_id: str) -> bool:
        """A live classic or consumer (KIP-848) group has the id."""
        group = self.groups.get(group_id)
        return group is not None and not group.is_(GroupState.DEAD)

    def now(self) -> Instant:
        return Instant(self.clock.now_s() * 1000, self.clock.wall_ms())

    def on_transaction_completed(
        self, offsets_partition: int, producer_id: int, committed: bool
    ) -> None:
        """A COMMIT (`committed`) or ABORT marker of `producer_id` was committed on
        `__consumer_offsets` partition `offsets_partition`: the offsets that producer's
        transaction committed there (TxnOffsetCommit) become visible, or are dropped.

        A partition still loading replays the marker from its log instead; one this broker
        does not coordinate has nothing pending."""
        completed = self.pending.complete(offsets_partition, producer_id)
        if not committed:
            if completed:
                logger.info(
                    "dropped the offsets of aborted transaction of producer %d for groups %s",
                    producer_id,
                    ", ".join(sorted(completed)),
                )
            return
        for group_id, offsets in completed.items():
            applied = materialize(self.machine.group_for_offsets(group_id), offsets)
            logger.debug(
                "transaction of producer %d committed %d offsets of group %s",
                producer_id,
                applied,
                group_id,
                extra={"group": group_id},
            )

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.machine.groups

    # -- ownership of offsets partitions -----------------------------------------------------

    @property
    def owned(self) -> dict[int, int]:
        return self.ownership.owned

    @property
    def loading(self) -> dict[int, int]:
        return self.ownership.loading

    def load(self) -> int:
        return self.ownership.load()

    def on_partition_leadership(self, partition: Partition) -> None:
        self.ownership.on_partition_leadership(partition)

    def is_loading(self) -> bool:
        return self.ownership.is_loading()

    def partition_for(self, group_id: str) -> int:
        return self.ownership.partition_for(group_id)

    async def ensure_offsets_topic(self) -> None:
        await self.offsets_log.ensure_created()

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Load partitions, write records, fire deadlines and expire offsets until
        cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.ownership.run)
            nursery.start_soon(self.writes.run)
            nursery.start_soon(self._fire_deadlines)
            nursery.start_soon(self._expire_offsets_periodically)

    def _on_earlier_deadline(self) -> None:
        self._earlier_deadline.set()

    async def _fire_deadlines(self) -> None:
        """Sleep until the machine's next deadline (or an earlier one appears); fire it."""
        while True:
            self._earlier_deadline = trio.Event()
            deadlines = [self.machine.next_deadline_ms(), self.consumer.next_deadline_ms()]
            deadline = min((d for d in deadlines if d is not None), default=None)
            wait_s = math.inf if deadline is None else (deadline - self.clock.now_s() * 1000) / 1000
            with trio.move_on_after(max(0.0, wait_s)) as timer:
                await self._earlier_deadline.wait()
            if timer.cancelled_caught and deadline is not None:
                now = self.now()
                # Woken for `deadline`: it is due even if the clock reads a rounding before.
                self.machine.tick(Instant(max(now.ms, deadline), now.wall_ms))
                self.consumer.tick(Instant(max(now.ms, deadline), now.wall_ms))

    async def _expire_offsets_periodically(self) -> None:
        while True:
            await trio.sleep(self.config.retention_check_interval_ms / 1000)
            await self.offsets.expire()

    def _store_group(self, group: ConsumerGroup) -> None:
        self.writes.store_group_metadata(group.group_id, group.to_record())

    def _store_assignment(self, group: ConsumerGroup) -> None:
        generation = group.generation_id

        def stored(error: ErrorCode) -> None:
            self.machine.assignment_stored(group, generation, error, self.now())

        self.writes.store_group_metadata(group.group_id, group.to_record(), stored)

    def _store_consumer_records(self, group_id: str, records: list[KeyValue]) -> None:
        append = self.writes.append(group_id, records)
        if self._heartbeat_appends is not None:
            self._heartbeat_appends.append(append)

    # -- ConsumerGroupHeartbeat (KIP-848) ------------------------------------------------------

    async def consumer_group_heartbeat(
        self, request: HeartbeatRequest, version: int
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat, answered once the records it changed (member,
        assignment, group epoch) are in the log; a failed write answers NOT_COORDINATOR or
        COORDINATOR_NOT_AVAILABLE, and the member's next heartbeat is refused or rejoins."""
        # The empty group id is routed like any other and then refused as INVALID_REQUEST
        # (Kafka's "GroupId can't be empty."), as Kafka does.
        error = self.ownership.request_error(request.group_id, empty_allowed=True)
        if error != ErrorCode.none:
            return HeartbeatResult(error, None, request.member_id or None)
        if request.group_id in self.share.groups:
            message = f"group {request.group_id} is a share group, not a consumer group"
            return HeartbeatResult(ErrorCode.group_id_not_found, message, request.member_id or None)
        await self.writes.wait_for_room(request.group_id)
        error = self.ownership.request_error(request.group_id, empty_allowed=True)
        if error != ErrorCode.none:
            return HeartbeatResult(error, None, request.member_id or None)
        appends: list[Append] = []
        self._heartbeat_appends = appends
        try:
            result = self.consumer.heartbeat(request, self.now(), version)
        finally:
            self._heartbeat_appends = None
        for append in appends:
            written = await append.wait()
            if written != ErrorCode.none and result.error == ErrorCode.none:
                result = HeartbeatResult(written, "the group's records could not be stored")
        return result

    def consumer_group(self, group_id: str) -> tuple[ErrorCode, ConsumerProtocolGroup | None]:
        """ConsumerGroupDescribe: the group's state, or GROUP_ID_NOT_FOUND naming why."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return error, None
        group = self.groups.get(group_id)
        if group is None or group.consumer is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, None
        return ErrorCode.none, group.consumer

    async def wait_for_write_room(self, group_id: str) -> None:
        """Back-pressure for JoinGroup and SyncGroup: wait while the group's partition has
        `WRITES_QUEUED_MAX` appends queued."""
        if valid_group_id(group_id):
            await self.writes.wait_for_room(group_id)

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------

    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult | Reply[JoinResult]:
        """The answer now, or a `Reply` that gets it once the group decides."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return JoinResult(error, member_id)
        if group_id in self.share.groups:
            # Kafka refuses a classic member in a share group's id so.
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        request = JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
        )
        reply: Reply[JoinResult] = Reply()
        result = self.machine.join(request, reply, self.now())
        return reply if result is None else result

    def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | Reply[SyncResult]:
        """The answer now, or a `Reply` that gets it once the group decides."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        request = SyncRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
        )
        reply: Reply[SyncResult] = Reply()
        result = self.machine.sync(request, reply, self.now())
        return reply if result is None else result

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return error
        return self.machine.heartbeat(
            group_id, generation_id, member_id, group_instance_id, self.now()
        )

    def leave_group(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, group instance id) leaving)."""
        leaving = list(members)
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return error, [error] * len(leaving)
        return self.machine.leave(group_id, leaving, self.now())

    # -- offsets -------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
        api_version: int = 9,
    ) -> ErrorCode:
        """OffsetCommit (`api_version` of the request: a consumer-protocol member needs v9)."""
        return await self.offsets.commit(
            group_id, generation_id, member_id, group_instance_id, offsets, api_version
        )

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
        verify: Callable[[], Awaitable[ErrorCode]] | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: once this answers NONE the offsets are in the log, pending until
        `on_transaction_completed`; `verify` as `OffsetsStore.commit_transactional`."""
        return await self.offsets.commit_transactional(
            group_id,
            producer_id,
            producer_epoch,
            generation_id,
            member_id,
            group_instance_id,
            offsets,
            verify,
        )

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue | None]]:
        return self.offsets.fetch(group_id, partitions, member)

    def unstable_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """Those of the partitions with an offset of an open transaction (require_stable)."""
        return self.offsets.unstable(group_id, partitions)

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return await self.offsets.delete(group_id, partitions)

    async def expire_offsets(self) -> int:
        return await self.offsets.expire()

    # -- listing, describing, deleting ---------------------------------------------------------

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every live group matching the filters."""
        return [entry[:3] for entry in self.list_typed_groups(states, types)]

    def list_typed_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type: classic or consumer) of every live
        group matching the filters."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed = []
        for g in self.groups.values():
            if g.is_(GroupState.DEAD) or not self.ownership.is_owned(g.group_id):
                continue
            if g.consumer is None:
                group_type, state = GROUP_TYPE_CLASSIC, g.state.value
            else:
                group_type, state = GROUP_TYPE_CONSUMER, g.consumer.state().value
            if wanted_states and state.lower() not in wanted_states:
                continue
            if wanted_types and group_type not in wanted_types:
                continue
            listed.append((g.group_id, g.protocol_type or "", state, group_type))
        return listed

    def list_share_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type "share", state, group type "share") of the share groups
        this broker coordinates that match the filters."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "share" not in wanted_types:
            return []
        return [
            (g.group_id, "share", g.state, "share")
            for g in self.share.groups.values()
            if self.ownership.is_owned(g.group_id)
            and (not wanted_states or g.state.lower() in wanted_states)
        ]

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error = self.ownership.owner_error(group_id)
        if error != ErrorCode.none:
            return error, GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            # As in Kafka, DescribeGroups sees only classic groups: ConsumerGroupDescribe
            # describes the others.
            return ErrorCode.none, GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.is_(GroupState.STABLE)
        protocol = group.protocol_name or ""
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return ErrorCode.none, GroupDescription(
            group_id, group.state.value, group.protocol_type or "", protocol, members
        )

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: empty groups turn Dead; their offsets and metadata are tombstoned,
        those open transactions committed too (as Kafka does)."""
        results: dict[str, ErrorCode] = {}
        appends: list[tuple[str, Append]] = []
        for group_id in group_ids:
            error = self._delete_error(group_id)
            if error == ErrorCode.none:
                await self.writes.wait_for_room(group_id)
                error = self._delete_error(group_id)  # the group may have changed meanwhile
            results[group_id] = error
            if error != ErrorCode.none:
                continue
            group = self.groups[group_id]
            tombstoned = list(group.offsets)
            tombstoned += sorted(self.pending.partitions_of(group_id) - group.offsets.keys())
            records: list[KeyValue] = [
                (OffsetKey(group_id, t, p).encode(), None) for t, p in tombstoned
            ]
            records.append((GroupMetadataKey(group_id).encode(), None))
            if group.consumer is not None:
                records.append((ConsumerGroupMetadataKey(group_id).encode(), None))
            self.machine.delete(group_id, self.clock.wall_ms())
            self.pending.discard_group(group_id)
            appends.append((group_id, self.writes.append(group_id, records)))
            logger.info("deleted group %s", group_id, extra={"group": group_id})
        for group_id, append in appends:
            error = await append.wait()
            if error != ErrorCode.none:
                results[group_id] = error
        return results

    def _delete_error(self, group_id: str) -> ErrorCode:
        error = self.ownership.request_error(group_id, empty_allowed=True)
        if error != ErrorCode.none:
            return error
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.non_empty_group
        return ErrorCode.none
