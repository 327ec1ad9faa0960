"""Which groups this broker coordinates: those of the `__consumer_offsets` partitions it leads.

As in Kafka's GroupMetadataManager, when this broker becomes leader of an offsets partition
(`become_leader`, driven by the topic manager's leadership listeners) the partition is
"loading" -- its groups get COORDINATOR_LOAD_IN_PROGRESS -- until its log is committed and
replayed into the rebalance machine; when it loses leadership (`resign`) its groups are
dropped from memory. Groups of partitions it does not lead get NOT_COORDINATOR, so clients
look the coordinator up again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.groups.group import ConsumerGroup, GroupState, Member, valid_group_id
from raftka.broker.groups.records import (
    GroupMetadataValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_key,
    partition_for_group,
)
from raftka.broker.groups.store import OFFSETS_TOPIC, OffsetsLog
from raftka.broker.log_output import partition_context

if TYPE_CHECKING:
    from raftka.broker.groups.rebalance import Instant, RebalanceMachine
    from raftka.broker.topics import Partition

logger = logging.getLogger("raftka.groups")


class Ownership:
    """The offsets partitions this broker coordinates, and the loading of their groups into
    `machine`. Loads run in the nursery of `run`; those started before it wait for it."""

    def __init__(
        self, offsets_log: OffsetsLog, machine: RebalanceMachine, now: Callable[[], Instant]
    ) -> None:
        self.offsets_log = offsets_log
        self.machine = machine
        self._now = now
        # Leader epoch of the partitions whose groups are loaded, and of those loading.
        self.owned: dict[int, int] = {}
        self.loading: dict[int, int] = {}
        self._nursery: trio.Nursery | None = None

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.offsets_log.num_partitions)

    def is_loading(self) -> bool:
        return bool(self.loading)

    def is_owned(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def request_error(self, group_id: str) -> ErrorCode:
        """What a request for the group gets before the group is looked at: INVALID_GROUP_ID
        for an id Kafka refuses, else `owner_error`."""
        if not valid_group_id(group_id):
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
        self.loading[partition] = epoch
        logger.info(
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
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for partition, epoch in list(self.loading.items()):
                    nursery.start_soon(self._load_partition, partition, epoch)
                await trio.sleep_forever()
        finally:
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
            groups, count = self._replay(partition)
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
        del self.loading[partition]
        self.owned[partition] = epoch
        if count:
            logger.info(
                "loaded %s-%d (epoch %d): %d records",
                OFFSETS_TOPIC,
                partition,
                epoch,
                count,
                extra=partition_context(OFFSETS_TOPIC, partition),
            )

    def _replay(self, partition: int) -> tuple[list[ConsumerGroup], int]:
        """The groups of one partition rebuilt from its records, and how many were read."""
        loaded: dict[str, ConsumerGroup] = {}
        metadata: dict[str, GroupMetadataValue | None] = {}
        count = 0
        for key, value in self.offsets_log.replay(partition):
            count += 1
            try:
                decoded = decode_key(key)
                if isinstance(decoded, OffsetKey):
                    group = loaded.setdefault(decoded.group_id, ConsumerGroup(decoded.group_id))
                    tp = (decoded.topic, decoded.partition)
                    if value is None:
                        group.offsets.pop(tp, None)
                    else:
                        group.offsets[tp] = OffsetValue.decode(value)
                else:
                    metadata[decoded.group_id] = (
                        None if value is None else GroupMetadataValue.decode(value)
                    )
            except (RecordFormatError, UnicodeDecodeError) as exc:
                logger.warning("skipping unreadable %s record: %s", OFFSETS_TOPIC, exc)
        now_ms = self._now().ms
        for group_id, stored in metadata.items():
            if stored is None:
                deleted = loaded.get(group_id)
                if deleted is not None and not deleted.offsets:
                    del loaded[group_id]
                continue
            restore(loaded.setdefault(group_id, ConsumerGroup(group_id)), stored, now_ms)
        for group_id in [g for g, group in loaded.items() if not group.offsets]:
            if metadata.get(group_id) is None:
                del loaded[group_id]
        groups = [g for g in loaded.values() if self.partition_for(g.group_id) == partition]
        return groups, count


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
