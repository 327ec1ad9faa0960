"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98) until their transaction ends.

A TxnOffsetCommit's records are in `__consumer_offsets` as a transactional batch of the
producer, but they count only once that producer's COMMIT marker follows them on the same
partition; an ABORT marker drops them. Until then they are pending, kept apart from the
committed offsets per offsets partition, producer and group: OffsetFetch does not show them
(with require_stable, KIP-447, it answers UNSTABLE_OFFSET_COMMIT for their partitions), and
offset expiry leaves their partitions and groups alone.

Each pending offset remembers the log offset of its record: when the transaction commits, it
replaces the group's committed offset only if it was written after it, as in Kafka (a plain
OffsetCommit written after the TxnOffsetCommit but before the marker wins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from raftka.broker.groups.records import OffsetValue

TopicPartition = tuple[str, int]
# Producer id -> group id -> partition -> pending offset, of one offsets partition.
ProducerOffsets = dict[int, dict[str, dict[TopicPartition, "PendingOffset"]]]


@dataclass(frozen=True, slots=True)
class PendingOffset:
    value: OffsetValue
    record_offset: int  # of its record in `__consumer_offsets`


class PendingTxnOffsets:
    """The pending transactional offsets of the offsets partitions this broker coordinates;
    `partition_for` maps a group to its offsets partition."""

    def __init__(self, partition_for: Callable[[str], int]) -> None:
        self.partition_for = partition_for
        self._by_partition: dict[int, ProducerOffsets] = {}
        self._open: dict[str, set[int]] = {}  # group id -> producers with pending offsets

    def add(
        self, group_id: str, producer_id: int, offsets: dict[TopicPartition, PendingOffset]
    ) -> None:
        """The producer's transaction committed these offsets for the group (a later one of
        the same partition replaces an earlier one)."""
        if not offsets:
            return
        producers = self._by_partition.setdefault(self.partition_for(group_id), {})
        producers.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        self._open.setdefault(group_id, set()).add(producer_id)

    def complete(
        self, partition: int, producer_id: int
    ) -> dict[str, dict[TopicPartition, PendingOffset]]:
        """Remove and return (group id -> offsets) what the producer's transaction left
        pending on the offsets partition: its marker was written there."""
        producers = self._by_partition.get(partition)
        if producers is None:
            return {}
        by_group = producers.pop(producer_id, {})
        if not producers:
            del self._by_partition[partition]
        for group_id in by_group:
            self._close(group_id, producer_id)
        return by_group

    def is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction committed an offset of `tp` for the group."""
        producers = self._open.get(group_id)
        if not producers:
            return False
        by_producer = self._by_partition.get(self.partition_for(group_id), {})
        return any(tp in by_producer.get(p, {}).get(group_id, {}) for p in producers)

    def has_open(self, group_id: str) -> bool:
        """Whether some open transaction committed offsets for the group."""
        return bool(self._open.get(group_id))

    def partitions_of(self, group_id: str) -> set[TopicPartition]:
        """Every partition some open transaction committed an offset of for the group."""
        by_producer = self._by_partition.get(self.partition_for(group_id), {})
        pending: set[TopicPartition] = set()
        for producer_id in self._open.get(group_id, ()):
            pending.update(by_producer.get(producer_id, {}).get(group_id, {}))
        return pending

    def pending_of(self, producer_id: int, group_id: str) -> dict[TopicPartition, PendingOffset]:
        """The offsets the producer's open transaction committed for the group."""
        by_producer = self._by_partition.get(self.partition_for(group_id), {})
        return dict(by_producer.get(producer_id, {}).get(group_id, {}))

    def discard(
        self, group_id: str, tps: Iterable[TopicPartition], before_offset: int | None = None
    ) -> None:
        """A tombstone of these partitions' offsets (at `before_offset`; None: now) removes
        the pending offsets written before it."""
        wanted = set(tps)
        by_producer = self._by_partition.get(self.partition_for(group_id), {})
        for producer_id in list(self._open.get(group_id, ())):
            offsets = by_producer.get(producer_id, {}).get(group_id)
            if offsets is None:
                continue
            for tp in wanted & offsets.keys():
                if before_offset is None or offsets[tp].record_offset < before_offset:
                    del offsets[tp]
            if not offsets:
                self._remove(by_producer, producer_id, group_id)

    def discard_group(self, group_id: str) -> None:
        """The group was deleted: its pending offsets go with it."""
        by_producer = self._by_partition.get(self.partition_for(group_id), {})
        for producer_id in list(self._open.get(group_id, ())):
            self._remove(by_producer, producer_id, group_id)

    def drop_partition(self, partition: int) -> None:
        """This broker no longer coordinates the offsets partition."""
        for by_group in self._by_partition.pop(partition, {}).values():
            for group_id in by_group:
                self._open.pop(group_id, None)

    def adopt_partition(self, partition: int, loaded: PendingTxnOffsets) -> None:
        """Take over what `loaded` (a replay of the partition's log) holds for it."""
        self.drop_partition(partition)
        producers = loaded._by_partition.get(partition)
        if not producers:
            return
        self._by_partition[partition] = producers
        for producer_id, by_group in producers.items():
            for group_id in by_group:
                self._open.setdefault(group_id, set()).add(producer_id)

    def _remove(self, by_producer: ProducerOffsets, producer_id: int, group_id: str) -> None:
        by_group = by_producer.get(producer_id)
        if by_group is not None:
            by_group.pop(group_id, None)
            if not by_group:
                del by_producer[producer_id]
        self._close(group_id, producer_id)

    def _close(self, group_id: str, producer_id: int) -> None:
        producers = self._open.get(group_id)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._open[group_id]
