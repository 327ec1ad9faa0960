"""Which groups this broker coordinates: those of the `__consumer_offsets` partitions it leads.

As in Kafka's GroupMetadataManager, when this broker becomes leader of an offsets partition
(`become_leader`, driven by the topic manager's leadership listeners) the partition is
"loading" -- its groups get COORDINATOR_LOAD_IN_PROGRESS -- until its log is committed and
replayed into the rebalance machine (and the pending transactional offsets); when it loses
leadership (`resign`) its groups are dropped from memory. Groups of partitions it does not
lead get NOT_COORDINATOR, so clients look the coordinator up again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.groups.consumer_group import GROUP_TYPE_CONSUMER, restore_group
from raftka.broker.groups.consumer_records import MemberAssignmentValue, MemberMetadataValue
from raftka.broker.groups.group import ConsumerGroup, GroupState, Member, valid_group_id
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupMetadataValue,
    MemberKey,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_key,
    partition_for_group,
)
from raftka.broker.groups.store import OFFSETS_TOPIC, OffsetsLog, StoredRecord, TxnMarker
from raftka.broker.groups.txn_offsets import PendingOffset, PendingTxnOffsets
from raftka.broker.log_output import partition_context

if TYPE_CHECKING:
    from raftka.broker.groups.instant import Instant
    from raftka.broker.groups.rebalance import RebalanceMachine
    from raftka.broker.topics import Partition

logger = logging.getLogger("raftka.groups")


@dataclass(slots=True)
class LoadSummary:
    """What the partitions loaded since loading last went idle held, for one log line."""

    started: float = 0.0
    partitions: int = 0
    groups: int = 0
    records: int = 0


class Ownership:
    """The offsets partitions this broker coordinates, and the loading of their groups into
    `machine`. Loads run in the nursery of `run`; those started before it wait for it."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        machine: RebalanceMachine,
        now: Callable[[], Instant],
        pending: PendingTxnOffsets | None = None,
    ) -> None:
        self.offsets_log = offsets_log
        self.machine = machine
        self._now = now
        self.pending = pending if pending is not None else PendingTxnOffsets(self.partition_for)
        # Leader epoch of the partitions whose groups are loaded, and of those loading.
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        # Called with each group a load restored, after the classic machine adopted it.
        self.on_adopt: list[Callable[[ConsumerGroup], None]] = []
        self._nursery: trio.Nursery | None = None
        # Partitions loaded since `loading` was last empty: reported in one line when it is.
        self._loads = LoadSummary()

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.offsets_log.num_partitions)

    def is_loading(self) -> bool:
        return bool(self.loading)

    def is_owned(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def request_error(self, group_id: str, *, empty_allowed: bool = False) -> ErrorCode:
        """What a request for the group gets before the group is looked at: INVALID_GROUP_ID
        for an id Kafka refuses (the empty one unless `empty_allowed`), else `owner_error`."""
        if not valid_group_id(group_id, empty_allowed=empty_allowed):
            return ErrorCode.invalid_group_id
        return self.owner_error(group_id)

    def owner_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates the group; NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS otherwise."""
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        epoch = self.owned.get(partition)
        if epoch is None:
            return ErrorCode.not_coordinator
        if self.offsets_log.leader_epoch(partition) != epoch:
            # Leadership moved without this broker hearing of it (or the partition is gone).
            self.resign(partition)
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # -- leadership ------------------------------------------------------------------------

    def load(self) -> int:
        """Start loading every offsets partition this broker already leads (the others load
        as leadership arrives); returns how many were scheduled."""
        led = self.offsets_log.led_partitions()
        for partition, epoch in led.items():
            self.become_leader(partition, epoch)
        return len(led)

    def on_partition_leadership(self, partition: Partition) -> None:
        """A `TopicManager` leadership listener: follows `__consumer_offsets` partitions."""
        if partition.topic.name != OFFSETS_TOPIC:
            return
        if partition.log is not None and partition.is_leader:
            self.become_leader(partition.index, partition.leader_epoch)
        else:
            self.resign(partition.index)

    def become_leader(self, partition: int, epoch: int) -> None:
        """This broker leads `partition` at `epoch`: load its groups, then serve them."""
        if self.owned.get(partition) == epoch or self.loading.get(partition) == epoch:
            return
        if partition in self.owned:
            self.resign(partition)  # a new term: reload what the log holds now
        if not self.loading:
            self._loads = LoadSummary(started=time.monotonic())
        self.loading[partition] = epoch
        logger.debug(
            "loading groups of %s-%d (epoch %d)",
            OFFSETS_TOPIC,
            partition,
            epoch,
            extra=partition_context(OFFSETS_TOPIC, partition),
        )
        if self._nursery is not None:
            self._nursery.start_soon(self._load_partition, partition, epoch)

    def resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its groups at once."""
        was_owned = self.owned.pop(partition, None) is not None
        was_loading = self.loading.pop(partition, None) is not None
        dropped = [g for g in self.machine.groups if self.partition_for(g) == partition]
        for group_id in dropped:
            self.machine.drop(group_id)
        self.pending.drop_partition(partition)
        if was_owned or was_loading or dropped:
            logger.info(
                "no longer coordinating %s-%d: dropped %d groups",
                OFFSETS_TOPIC,
                partition,
                len(dropped),
                extra=partition_context(OFFSETS_TOPIC, partition),
            )

    # -- loading ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Load partitions (those scheduled before too) until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                for partition, epoch in list(self.loading.items()):
                    nursery.start_soon(self._load_partition, partition, epoch)
                await trio.sleep_forever()
            finally:
                # Forgotten before the nursery waits for its loads: a leadership change
                # heard while they stop (the broker stopping) starts nothing in a nursery
                # trio may already have closed.
                self._nursery = None

    async def _load_partition(self, partition: int, epoch: int) -> None:
        try:
            caught_up = await self.offsets_log.wait_caught_up(partition, epoch)
        except Exception:
            logger.exception(
                "cannot load %s-%d",
                OFFSETS_TOPIC,
                partition,
                extra=partition_context(OFFSETS_TOPIC, partition),
            )
            caught_up = False
        if self.loading.get(partition) != epoch:
            return  # resigned, or a newer term's load took over
        if not caught_up:
            self.resign(partition)
            return
        try:
            groups, pending, count = self._replay(partition)
        except Exception:
            logger.exception(
                "cannot replay %s-%d",
                OFFSETS_TOPIC,
                partition,
                extra=partition_context(OFFSETS_TOPIC, partition),
            )
            self.resign(partition)
            return
        for group in groups:
            self.machine.adopt(group)
            for adopt in self.on_adopt:
                adopt(group)
        self.pending.adopt_partition(partition, pending)
        del self.loading[partition]
        self.owned[partition] = epoch
        logger.debug(
            "loaded %s-%d (epoch %d): %d records",
            OFFSETS_TOPIC,
            partition,
            epoch,
            count,
            extra=partition_context(OFFSETS_TOPIC, partition),
        )
        loads = self._loads
        loads.partitions += 1
        loads.records += count
        loads.groups += len(groups)
        if not self.loading:
            # A lone empty partition is a new one (the topic's creation leads its partitions
            # one at a time): told at DEBUG, or the first group's use would print fifty lines.
            quiet = loads.partitions == 1 and loads.records == 0
            logger.log(
                logging.DEBUG if quiet else logging.INFO,
                "coordinating the groups of %d %s partitions: %d groups from %d records (%.2f s)",
                loads.partitions,
                OFFSETS_TOPIC,
                loads.groups,
                loads.records,
                time.monotonic() - loads.started,
                extra={"topic": OFFSETS_TOPIC},
            )

    def _replay(self, partition: int) -> tuple[list[ConsumerGroup], PendingTxnOffsets, int]:
        """The groups of one partition and their pending transactional offsets, rebuilt
        from its records and markers, and how many entries were read."""
        loaded: dict[str, ConsumerGroup] = {}
        metadata: dict[str, GroupMetadataValue | None] = {}
        # Consumer groups (KIP-848): group epoch, or None after a tombstone. A group's
        # classic metadata or consumer-group record, whichever comes last, says its type.
        consumer_epochs: dict[str, int | None] = {}
        members = ConsumerMembers({}, {})
        pending = PendingTxnOffsets(self.partition_for)
        count = 0
        for entry in self.offsets_log.replay_log(partition):
            count += 1
            if isinstance(entry, TxnMarker):
                completed = pending.complete(partition, entry.producer_id)
                if entry.committed:
                    for group_id, offsets in completed.items():
                        group = loaded.setdefault(group_id, ConsumerGroup(group_id))
                        materialize(group, offsets)
                continue
            try:
                self._replay_record(entry, loaded, metadata, pending, consumer_epochs, members)
            except (RecordFormatError, UnicodeDecodeError) as exc:
                logger.warning("skipping unreadable %s record: %s", OFFSETS_TOPIC, exc)
        now_ms = self._now().ms
        for group_id, epoch in consumer_epochs.items():
            if epoch is None:
                continue
            group = loaded.setdefault(group_id, ConsumerGroup(group_id))
            group.consumer = restore_group(
                epoch,
                {m: v for (g, m), v in members.metadata.items() if g == group_id},
                {m: v for (g, m), v in members.assignments.items() if g == group_id},
            )
            group.protocol_type = GROUP_TYPE_CONSUMER
        for group_id, stored in metadata.items():
            if group_id in consumer_epochs and consumer_epochs[group_id] is not None:
                continue
            if stored is None:
                deleted = loaded.get(group_id)
                if deleted is not None and not deleted.offsets and not pending.has_open(group_id):
                    del loaded[group_id]
                continue
            restore(loaded.setdefault(group_id, ConsumerGroup(group_id)), stored, now_ms)
        for group_id in [g for g, group in loaded.items() if not group.offsets]:
            if loaded[group_id].consumer is not None:
                continue
            if metadata.get(group_id) is None and not pending.has_open(group_id):
                del loaded[group_id]
        groups = [g for g in loaded.values() if self.partition_for(g.group_id) == partition]
        return groups, pending, count

    @staticmethod
    def _replay_record(
        entry: StoredRecord,
        loaded: dict[str, ConsumerGroup],
        metadata: dict[str, GroupMetadataValue | None],
        pending: PendingTxnOffsets,
        consumer_epochs: dict[str, int | None],
        members: ConsumerMembers,
    ) -> None:
        decoded = decode_key(entry.key)
        if isinstance(decoded, MemberKey):
            member = (decoded.group_id, decoded.member_id)
            if decoded.assignment:
                if entry.value is None:
                    members.assignments.pop(member, None)
                else:
                    members.assignments[member] = MemberAssignmentValue.decode(entry.value)
            elif entry.value is None:
                members.metadata.pop(member, None)
            else:
                members.metadata[member] = MemberMetadataValue.decode(entry.value)
            return
        if isinstance(decoded, ConsumerGroupMetadataKey):
            consumer_epochs.pop(decoded.group_id, None)
            metadata.pop(decoded.group_id, None)
            consumer_epochs[decoded.group_id] = (
                None
                if entry.value is None
                else ConsumerGroupMetadataValue.decode(entry.value).epoch
            )
            return
        if not isinstance(decoded, OffsetKey):
            if entry.value is not None:
                consumer_epochs.pop(decoded.group_id, None)
            metadata[decoded.group_id] = (
                None if entry.value is None else GroupMetadataValue.decode(entry.value)
            )
            return
        group_id = decoded.group_id
        group = loaded.setdefault(group_id, ConsumerGroup(group_id))
        tp = (decoded.topic, decoded.partition)
        if entry.value is None:
            group.offsets.pop(tp, None)
            group.committed_at.pop(tp, None)
            pending.discard(group_id, [tp])
        elif entry.producer_id >= 0:
            value = OffsetValue.decode(entry.value)
            pending.add(group_id, entry.producer_id, {tp: PendingOffset(value, entry.offset)})
        else:
            group.offsets[tp] = OffsetValue.decode(entry.value)
            group.committed_at[tp] = entry.offset


@dataclass(frozen=True, slots=True)
class ConsumerMembers:
    """The consumer group members' records a replay read, by (group id, member id)."""

    metadata: dict[tuple[str, str], MemberMetadataValue]
    assignments: dict[tuple[str, str], MemberAssignmentValue]


def materialize(group: ConsumerGroup, offsets: dict[tuple[str, int], PendingOffset]) -> int:
    """A committed transaction's offsets become the group's, except where the group's offset
    was written after them; returns how many did."""
    applied = 0
    for tp, pending in offsets.items():
        if tp in group.offsets and group.committed_at.get(tp, -1) > pending.record_offset:
            continue
        group.offsets[tp] = pending.value
        group.committed_at[tp] = pending.record_offset
        applied += 1
    return applied


def restore(group: ConsumerGroup, stored: GroupMetadataValue, now_ms: float) -> None:
    """A group as its stored metadata describes it; its members' sessions start at `now_ms`."""
    group.generation_id = stored.generation
    group.protocol_type = stored.protocol_type or None
    group.protocol_name = stored.protocol
    group.current_state_timestamp_ms = stored.current_state_timestamp_ms
    for record in stored.members:
        group.add(
            Member(
                member_id=record.member_id,
                group_instance_id=record.group_instance_id,
                client_id=record.client_id,
                client_host=record.client_host,
                rebalance_timeout_ms=record.rebalance_timeout_ms,
                session_timeout_ms=record.session_timeout_ms,
                protocol_type=stored.protocol_type,
                protocols=[(stored.protocol or "", record.subscription)],
                assignment=record.assignment,
                session_deadline_ms=now_ms + record.session_timeout_ms,
            )
        )
    group.leader_id = stored.leader if stored.leader in group.members else group.leader_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
