"""Committed offsets of the groups this broker coordinates: OffsetCommit, TxnOffsetCommit,
OffsetFetch, OffsetDelete and expiry after offsets.retention.minutes.

An offset is applied to its group once its record is committed to `__consumer_offsets`;
a failed append changes nothing. Every write waits for room in its partition's queue. A
TxnOffsetCommit's offsets stay pending (`txn_offsets`) until their transaction ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from kio.schema.errors import ErrorCode

from raftka.broker.groups.config import CoordinatorConfig
from raftka.broker.groups.consumer_group import commit_error, fetch_error
from raftka.broker.groups.group import GroupState
from raftka.broker.groups.instant import Instant
from raftka.broker.groups.ownership import Ownership
from raftka.broker.groups.rebalance import RebalanceMachine
from raftka.broker.groups.records import (
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetKey,
    OffsetValue,
)
from raftka.broker.groups.store import KeyValue
from raftka.broker.groups.txn_offsets import PendingOffset, PendingTxnOffsets
from raftka.broker.groups.writes import WriteQueue

logger = logging.getLogger("raftka.groups")

OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes

TopicPartition = tuple[str, int]


class GroupOffsets:
    """The offsets of `machine`'s groups, written through `writes`; those of open
    transactions are in `ownership.pending`."""

    def __init__(
        self,
        config: CoordinatorConfig,
        machine: RebalanceMachine,
        ownership: Ownership,
        writes: WriteQueue,
        now: Callable[[], Instant],
    ) -> None:
        self.config = config
        self.machine = machine
        self.ownership = ownership
        self.writes = writes
        self._now = now

    @property
    def pending(self) -> PendingTxnOffsets:
        return self.ownership.pending

    def validate_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        api_version: int = 9,
    ) -> ErrorCode:
        """Kafka's group checks for an OffsetCommit (doCommitOffsets), without changes."""
        error = self.ownership.request_error(group_id, empty_allowed=True)
        if error != ErrorCode.none:
            return error
        group = self.machine.groups.get(group_id)
        if group is None:
            return ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.consumer is not None:
            return commit_error(group.consumer, member_id, generation_id, api_version=api_version)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.none  # a group that only stores offsets (no group management)
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetValue],
        api_version: int = 9,
    ) -> ErrorCode:
        """Validate, append the offsets to the group's partition, then apply them."""
        error = self.validate_commit(
            group_id, generation_id, member_id, group_instance_id, api_version
        )
        if error != ErrorCode.none or not offsets:
            return error
        await self.writes.wait_for_room(group_id)
        # The group may have changed while the request waited for room.
        error = self.validate_commit(
            group_id, generation_id, member_id, group_instance_id, api_version
        )
        if error != ErrorCode.none:
            return error
        group = self.machine.group_for_offsets(group_id)
        self.machine.keep_alive(group, member_id, self._now())
        records: list[KeyValue] = [
            (OffsetKey(group_id, topic, partition).encode(), value.encode())
            for (topic, partition), value in offsets.items()
        ]
        append = self.writes.append(group_id, records)
        error = await append.wait()
        if error != ErrorCode.none:
            return error
        # A group deleted while the append waited keeps it deleted.
        if self.machine.groups.get(group_id) is group:
            group.offsets.update(offsets)
            for i, tp in enumerate(offsets):
                group.committed_at[tp] = append.base_offset + i
        return ErrorCode.none

    def validate_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka's group checks for a TxnOffsetCommit, without changes: like OffsetCommit's,
        but a request without member and generation (v0-2) passes for any group, and a
        rebalance in progress does not refuse it."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return error
        group = self.machine.groups.get(group_id)
        if group is None:
            # Kafka 3.9 answers a generation for a group it does not know with
            # UNKNOWN_MEMBER_ID (the member is checked before the generation).
            return ErrorCode.none if generation_id < 0 else ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.consumer is not None:
            return commit_error(group.consumer, member_id, generation_id, transactional=True)
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.none
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.none
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    async def commit_transactional(
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
        """Validate, append the offsets to the group's partition as one transactional batch
        of the producer, then keep them pending until its transaction ends. `verify` asks
        the transaction coordinator whether the producer's transaction holds this partition
        (KIP-890); its error refuses the commit. Kafka 3.9 asks once this broker is known to
        coordinate the group, before the group's own checks (generation, member)."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none or not offsets:
            return error
        if verify is not None:
            error = await verify()
            if error != ErrorCode.none:
                return error
        error = self.validate_txn_commit(group_id, generation_id, member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        await self.writes.wait_for_room(group_id)
        error = self.validate_txn_commit(group_id, generation_id, member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        group = self.machine.group_for_offsets(group_id)
        records: list[KeyValue] = [
            (OffsetKey(group_id, topic, partition).encode(), value.encode())
            for (topic, partition), value in offsets.items()
        ]
        append = self.writes.append(group_id, records, (producer_id, producer_epoch))
        error = await append.wait()
        if error != ErrorCode.none:
            return error
        if self.machine.groups.get(group_id) is group:
            self.pending.add(
                group_id,
                producer_id,
                {
                    tp: PendingOffset(value, append.base_offset + i)
                    for i, (tp, value) in enumerate(offsets.items())
                },
            )
        return ErrorCode.none

    def fetch(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        member: tuple[str | None, int] = (None, -1),
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue | None]]:
        """Committed offsets of the given partitions (None: all the group has); offsets of
        open transactions are not committed yet. `member` (id, epoch) of OffsetFetch v9 is
        checked against a consumer group's member."""
        error = self.ownership.request_error(group_id, empty_allowed=True)
        if error != ErrorCode.none:
            return error, {}
        group = self.machine.groups.get(group_id)
        if group is not None and group.consumer is not None:
            error = fetch_error(group.consumer, *member)
            if error != ErrorCode.none:
                return error, {}
        stored = {} if group is None else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(sorted(stored.items()))
        return ErrorCode.none, {tp: stored.get(tp) for tp in partitions}

    def unstable(self, group_id: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Those of the partitions whose offset an open transaction committed: with
        require_stable (KIP-447) OffsetFetch answers UNSTABLE_OFFSET_COMMIT for them."""
        if not self.pending.has_open(group_id):
            return set()
        return {tp for tp in partitions if self.pending.is_pending(group_id, tp)}

    async def delete(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for the topics a live group subscribes to."""
        error, results, deleted = self._plan_delete(group_id, partitions)
        if error != ErrorCode.none or not deleted:
            return error, results
        await self.writes.wait_for_room(group_id)
        error, results, deleted = self._plan_delete(group_id, partitions)
        if error != ErrorCode.none or not deleted:
            return error, results
        group = self.machine.groups[group_id]
        records: list[KeyValue] = [(OffsetKey(group_id, t, p).encode(), None) for t, p in deleted]
        append = self.writes.append(group_id, records)
        error = await append.wait()
        if error != ErrorCode.none:
            return error, {}
        for tp in deleted:
            group.offsets.pop(tp, None)
            group.committed_at.pop(tp, None)
        # The tombstones also remove what open transactions committed before them.
        self.pending.discard(group_id, deleted, append.base_offset)
        return ErrorCode.none, results

    def _plan_delete(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode], list[TopicPartition]]:
        """(error, result per partition, the partitions whose offsets to tombstone)."""
        error = self.ownership.request_error(group_id)
        if error != ErrorCode.none:
            return error, {}, []
        group = self.machine.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}, []
        subscribed: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, {}, []
            subscribed = topics
        results: dict[TopicPartition, ErrorCode] = {}
        deleted = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if tp in group.offsets or self.pending.is_pending(group_id, tp):
                    deleted.append(tp)
        return ErrorCode.none, results, deleted

    async def expire(self) -> int:
        """Drop offsets of empty groups older than offsets.retention.minutes, and the empty
        groups left without offsets; tombstone them. Returns how many offsets expired."""
        expired_total = 0
        for group_id in list(self.machine.groups):
            if self._expiry(group_id) is not None:
                await self.writes.wait_for_room(group_id)
                expired_total += self._expire_group(group_id)
        if expired_total:
            logger.info("removed %d expired offsets", expired_total)
        return expired_total

    def _expiry(self, group_id: str) -> list[TopicPartition] | None:
        """The group's expired offsets; None when expiry leaves the group as it is."""
        group = self.machine.groups.get(group_id)
        if (
            group is None
            or not group.is_(GroupState.EMPTY)
            or not self.ownership.is_owned(group_id)
        ):
            return None
        retention = self.config.offsets_retention_ms
        now_wall_ms = self._now().wall_ms
        # A partition an open transaction committed an offset of keeps its offset (Kafka).
        pending = self.pending.partitions_of(group_id)
        expired = [
            tp
            for tp, value in group.offsets.items()
            if tp not in pending
            and (
                group.current_state_timestamp_ms
                if group.protocol_type and group.current_state_timestamp_ms >= 0
                else value.commit_timestamp_ms
            )
            + retention
            <= now_wall_ms
        ]
        if not expired and (group.offsets or group.members or pending):
            return None
        return expired

    def _expire_group(self, group_id: str) -> int:
        expired = self._expiry(group_id)  # again: the group may have changed meanwhile
        if expired is None:
            return 0
        group = self.machine.groups[group_id]
        records: list[KeyValue] = [(OffsetKey(group_id, t, p).encode(), None) for t, p in expired]
        for tp in expired:
            del group.offsets[tp]
            group.committed_at.pop(tp, None)
        # A group with open transactions stays: their offsets may still commit.
        if not group.offsets and not group.members and not self.pending.has_open(group_id):
            self.machine.delete(group_id, self._now().wall_ms)
            records.append((GroupMetadataKey(group_id).encode(), None))
            if group.consumer is not None:
                records.append((ConsumerGroupMetadataKey(group_id).encode(), None))
        if records:
            self.writes.append(group_id, records)
        return len(expired)
