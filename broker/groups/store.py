"""`__consumer_offsets` as the coordinator's store: appends through the normal log path.

`TopicOffsetsLog` writes each group of records as one genuine uncompressed v2 batch into the
group's partition (created on first use as an internal topic), honouring the partition's
flush policy before an append returns, and reads every batch back on start-up.
`MemoryOffsetsLog` is the in-memory double for tests; it stores real batches too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import trio

from broker.topics import Topic, TopicError, TopicManager, now_ms
from protocol.batch_builder import BatchDecodeError, build_batch, decode_batch, iter_batches
from protocol.records import validate_produce_records

logger = logging.getLogger("raftka.groups")

OFFSETS_TOPIC = "__consumer_offsets"
REPLAY_READ_BYTES = 4 * 1024 * 1024
# Offsets and group metadata must outlive time-based retention: Kafka compacts this topic,
# raftka (delete policy only) keeps it whole and tombstones what expires.
OFFSETS_TOPIC_CONFIGS = {"retention.ms": "-1", "segment.bytes": str(100 * 1024 * 1024)}

KeyValue = tuple[bytes, bytes | None]


def records_of(buf: bytes | memoryview) -> Iterator[KeyValue]:
    """(key, value) of every record of every batch in `buf`; unreadable batches are skipped."""
    for attributes, batch in iter_batches(buf):
        if attributes & 0x20:  # control batch
            continue
        try:
            for record in decode_batch(batch):
                if record.key is not None:
                    yield record.key, record.value
        except BatchDecodeError as exc:
            logger.warning("skipping unreadable %s batch: %s", OFFSETS_TOPIC, exc)


class TopicOffsetsLog:
    def __init__(self, topics: TopicManager, num_partitions: int) -> None:
        self.topics = topics
        self.num_partitions = num_partitions

    def topic(self) -> Topic:
        """The offsets topic, created with `num_partitions` partitions if it does not exist."""
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            try:
                topic = self.topics.create_topic(
                    OFFSETS_TOPIC, self.num_partitions, 1, OFFSETS_TOPIC_CONFIGS
                )
            except TopicError:
                topic = self.topics.get(OFFSETS_TOPIC)
            assert topic is not None
        if len(topic.partitions) != self.num_partitions:
            # The topic's own count wins over a changed offsets.topic.num.partitions, as in
            # Kafka: moving groups between partitions would lose their records.
            self.num_partitions = len(topic.partitions)
        return topic

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        topic = self.topic()
        target = topic.partitions[partition]
        now = now_ms()
        batch = bytearray(build_batch(records, now))
        headers = validate_produce_records(batch, len(batch))
        log = target.log
        log.append(batch, headers, target.leader_epoch, now)
        target.notify_appended()
        if log.should_flush(now):
            job = log.flush_job()
            if job is not None:
                await trio.to_thread.run_sync(job)

    def replay(self) -> Iterator[KeyValue]:
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        self.num_partitions = len(topic.partitions)
        for partition in topic.partitions:
            yield from read_partition(partition.log)


def read_partition(log: Any) -> Iterator[KeyValue]:
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, REPLAY_READ_BYTES, end, True)
        if not data:
            break
        last = offset
        for _, batch in iter_batches(data):
            # baseOffset + lastOffsetDelta + 1 is where the next batch starts.
            base = int.from_bytes(batch[0:8], "big", signed=True)
            last_delta = int.from_bytes(batch[23:27], "big", signed=True)
            last = base + last_delta + 1
        yield from records_of(data)
        if last <= offset:
            break
        offset = last


class MemoryOffsetsLog:
    """An in-memory `__consumer_offsets`: real v2 batches per partition, for tests."""

    def __init__(self, num_partitions: int = 50) -> None:
        self.num_partitions = num_partitions
        self.batches: dict[int, list[bytes]] = {}
        self.fail_appends = False

    async def append(self, partition: int, records: list[KeyValue]) -> None:
        await trio.lowlevel.checkpoint()
        if self.fail_appends:
            raise OSError("append failed (test)")
        self.batches.setdefault(partition, []).append(build_batch(records, now_ms()))

    def replay(self) -> Iterator[KeyValue]:
        for partition in sorted(self.batches):
            for batch in self.batches[partition]:
                yield from records_of(batch)
