"""The coordinator's appends to `__consumer_offsets`: one ordered queue per partition.

Each partition's appends run one at a time, in the order they were queued, so the last
record of a key in the log is the last one the coordinator decided. The queue is bounded:

- writes a client waits for (OffsetCommit, OffsetDelete, DeleteGroups, and the offset
  expiry task) wait for room (`wait_for_room`) while `WRITES_QUEUED_MAX` appends wait in
  their partition's queue, instead of growing it;
- a group's metadata (`store_group_metadata`, from JoinGroup, SyncGroup and the deadlines of
  the rebalance machine, which must never wait) is queued without waiting, but only its latest
  version needs writing: a newer one replaces the version still waiting in the queue. So
  the metadata waiting in a partition's queue is at most one append per group.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from kio.schema.errors import ErrorCode

from raftka.broker.groups.records import GroupMetadataKey, GroupMetadataValue, partition_for_group
from raftka.broker.groups.store import (
    OFFSETS_TOPIC,
    KeyValue,
    NotCoordinatorError,
    OffsetsLog,
    StaleProducerEpochError,
)
from raftka.broker.log_output import partition_context
from raftka.protocol.batch_builder import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

logger = logging.getLogger("raftka.groups")

# Appends waiting in one partition's queue beyond which client writes wait for room: each
# append is a Raft commit (and an fsync under flush.messages=1), so a longer queue would
# only add latency and memory; group metadata may exceed it by at most one per group.
WRITES_QUEUED_MAX = 64


def write_error(error: BaseException | None) -> ErrorCode:
    """Kafka's mapping of a failed append to `__consumer_offsets`: NOT_LEADER_OR_FOLLOWER
    becomes NOT_COORDINATOR, a fenced producer's INVALID_PRODUCER_EPOCH passes through,
    anything else COORDINATOR_NOT_AVAILABLE."""
    if error is None:
        return ErrorCode.none
    if isinstance(error, NotCoordinatorError):
        return ErrorCode.not_coordinator
    if isinstance(error, StaleProducerEpochError):
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.coordinator_not_available


@dataclass(eq=False)
class Append:
    """One batch for one partition; `done` is set once it was appended or failed."""

    partition: int
    records: list[KeyValue]
    done: trio.Event = field(default_factory=trio.Event)
    error: ErrorCode = ErrorCode.none
    # Called with the outcome, from the writer, before `done` is set.
    on_done: list[Callable[[ErrorCode], None]] = field(default_factory=list)
    metadata_of: str | None = None  # the group whose metadata is the only record
    # A TxnOffsetCommit's batch is transactional: (producer id, producer epoch).
    producer: tuple[int, int] | None = None
    # The leader epoch the append was decided at (None: any); another one refuses it.
    leader_epoch: int | None = None
    base_offset: int = -1  # where the batch landed, once appended

    async def wait(self) -> ErrorCode:
        await self.done.wait()
        return self.error


@dataclass(eq=False)
class _PartitionQueue:
    waiting: deque[Append] = field(default_factory=deque)
    # Group id -> its metadata append still waiting in `waiting` (and no later append in the
    # queue writes that group's metadata key), which a newer version may replace.
    metadata: dict[str, Append] = field(default_factory=dict)
    ready: trio.Event = field(default_factory=trio.Event)  # set when `waiting` gains one
    room: trio.Event = field(default_factory=trio.Event)  # set when `waiting` loses one
    writer_started: bool = False


class WriteQueue:
    """Ordered appends per partition of `offsets_log`; `run` writes them until cancelled."""

    def __init__(
        self,
        offsets_log: OffsetsLog,
        queued_max: int = WRITES_QUEUED_MAX,
        topic_name: str = OFFSETS_TOPIC,
    ) -> None:
        """`topic_name` is the topic `offsets_log` keeps, as logs name it."""
        self.offsets_log = offsets_log
        self.queued_max = queued_max
        self.topic_name = topic_name
        self._queues: dict[int, _PartitionQueue] = {}
        self._nursery: trio.Nursery | None = None

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.offsets_log.num_partitions)

    def queued(self, partition: int) -> int:
        """Appends waiting in the partition's queue (the one being written not counted)."""
        queue = self._queues.get(partition)
        return 0 if queue is None else len(queue.waiting)

    async def wait_for_room(self, group_id: str) -> None:
        """Wait until the group's partition queues fewer than `queued_max` appends. A caller
        that queues its append with no checkpoint in between keeps the bound."""
        queue = self._queue(self.partition_for(group_id))
        while len(queue.waiting) >= self.queued_max:
            await queue.room.wait()

    def append(
        self,
        group_id: str,
        records: list[KeyValue],
        producer: tuple[int, int] | None = None,
        leader_epoch: int | None = None,
    ) -> Append:
        """Queue the records as one append to the group's partition, behind everything
        queued before; with `producer` (id, epoch) as one transactional batch of that
        producer; with `leader_epoch`, refused (NOT_COORDINATOR) unless this broker still
        leads the partition at that epoch when the append is made. A client write calls
        `wait_for_room` first."""
        partition = self.partition_for(group_id)
        queue = self._queue(partition)
        job = Append(partition, records, producer=producer, leader_epoch=leader_epoch)
        metadata_key = GroupMetadataKey(group_id).encode()
        if any(key == metadata_key for key, _ in records):
            # The group's metadata waiting before this append must not be replaced by a
            # newer version anymore: that would write it before this one.
            queue.metadata.pop(group_id, None)
        self._enqueue(queue, job)
        return job

    def store_group_metadata(
        self,
        group_id: str,
        value: GroupMetadataValue | None,
        on_done: Callable[[ErrorCode], None] | None = None,
    ) -> None:
        """Queue the group's metadata (None: its tombstone) without waiting; it replaces the
        group's metadata still waiting, whose callers then learn this append's outcome."""
        partition = self.partition_for(group_id)
        queue = self._queue(partition)
        record: KeyValue = (
            GroupMetadataKey(group_id).encode(),
            None if value is None else value.encode(),
        )
        job = queue.metadata.get(group_id)
        if job is None:
            job = Append(partition, [record], metadata_of=group_id)
            queue.metadata[group_id] = job
            self._enqueue(queue, job)
        else:
            job.records = [record]
        if on_done is not None:
            job.on_done.append(on_done)

    def _queue(self, partition: int) -> _PartitionQueue:
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = _PartitionQueue()
        return queue

    def _enqueue(self, queue: _PartitionQueue, job: Append) -> None:
        queue.waiting.append(job)
        queue.ready.set()
        if not queue.writer_started and self._nursery is not None:
            queue.writer_started = True
            self._nursery.start_soon(self._write, job.partition, queue)

    async def run(self) -> None:
        """Write every partition's queue (those queued before `run` too) until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    for partition, queue in self._queues.items():
                        if not queue.writer_started:
                            queue.writer_started = True
                            nursery.start_soon(self._write, partition, queue)
                    await trio.sleep_forever()
                finally:
                    # Forgotten before the nursery waits for its writers, which trio may
                    # close before `run` returns: a write queued meanwhile starts nothing.
                    self._nursery = None
        finally:
            for queue in self._queues.values():
                queue.writer_started = False

    async def _write(self, partition: int, queue: _PartitionQueue) -> None:
        """Appends of one partition, one at a time and in order."""
        while True:
            while not queue.waiting:
                queue.ready = trio.Event()
                await queue.ready.wait()
            job = queue.waiting.popleft()
            if job.metadata_of is not None and queue.metadata.get(job.metadata_of) is job:
                del queue.metadata[job.metadata_of]  # being written: a newer version queues
            queue.room.set()
            queue.room = trio.Event()
            try:
                producer_id, producer_epoch = job.producer or (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                job.base_offset = await self.offsets_log.append(
                    partition, job.records, producer_id, producer_epoch, job.leader_epoch
                )
            except (NotCoordinatorError, StaleProducerEpochError) as exc:
                logger.info(
                    "cannot append to %s-%d: %s",
                    self.topic_name,
                    partition,
                    exc,
                    extra=partition_context(self.topic_name, partition),
                )
                job.error = write_error(exc)
            except Exception as exc:
                logger.exception(
                    "cannot append to %s-%d",
                    self.topic_name,
                    partition,
                    extra=partition_context(self.topic_name, partition),
                )
                job.error = write_error(exc)
            for callback in job.on_done:
                callback(job.error)
            job.done.set()
