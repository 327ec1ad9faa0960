"""Reading one partition's offset range [start, end) on an executor, as Spark's
`KafkaDataConsumer` does: assign at `start`, no consumer group, stop at `end`.

Offsets inside a range need not all hold records: a new leader's control batch (and, on
Kafka, transaction markers) leave gaps. So the reader stops when its position reaches `end`
(a record at or past `end`, or the end of the log at or past `end`), never by counting
records; the same range always yields the same records.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from raftka.pipeline.errors import SourceError, report_data_loss
from raftka.pipeline.options import client_settings

LOG = logging.getLogger("pipeline.range_reader")

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
CONSUME_BATCH = 5000  # records per consume() call
CONSUME_WAIT_S = 0.5


@dataclass(frozen=True)
class OffsetRange:
    """One partition's records from `start` (inclusive) to `end` (exclusive)."""

    topic: str
    partition: int
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


# A row of Spark's Kafka source schema (see `kafka_row`).
KafkaRow = tuple[object, ...]


def kafka_row(message: Message, include_headers: bool) -> KafkaRow:
    """A record as a row of Spark's Kafka source schema: key, value, topic, partition,
    offset, timestamp, timestampType (0 CreateTime, 1 LogAppendTime, -1 none) and, when
    asked, headers (None when the record has none, as Spark gives)."""
    ts_type, ts_ms = message.timestamp()
    # librdkafka numbers timestamp types from 0 = not available; Kafka's Java enum from -1.
    timestamp = None if ts_type == 0 else EPOCH + datetime.timedelta(milliseconds=ts_ms)
    row: KafkaRow = (
        message.key(),
        message.value(),
        message.topic(),
        message.partition(),
        message.offset(),
        timestamp,
        ts_type - 1,
    )
    if include_headers:
        headers = message.headers()
        # A consumer's message gives a list of pairs; the stub also allows a producer's dict.
        pairs = headers.items() if isinstance(headers, dict) else headers or []
        row += ([(k, v) for k, v in pairs] if headers else None,)
    return row


def read_range(
    consumer_config: Mapping[str, str],
    offset_range: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_s: float,
) -> Iterator[KafkaRow]:
    """Rows of every record in `offset_range`, in offset order.

    Offsets below the partition's log start (deleted by retention or DeleteRecords) are lost
    data: with `fail_on_data_loss` a `DataLossError` names the topic, partition and offsets,
    otherwise a warning is logged and reading goes on from the log start. No progress for
    `poll_timeout_s` is a `SourceError`.
    """
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    position = offset_range.start
    if position >= end:
        return
    try:
        consumer = Consumer(client_settings(consumer_config))
    except KafkaException as exc:
        raise SourceError(f"bad kafka.* option for the Kafka consumer: {exc}") from None
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, position)])
        progress_at = time.monotonic()
        while position < end:
            messages = consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S)
            for message in messages:
                error = message.error()
                # Set on records and on partition-EOF events (the log end offset).
                offset = message.offset() or 0
                if error is None:
                    if offset >= end:
                        position = end
                        break
                    if offset >= position:
                        yield kafka_row(message, include_headers)
                        position = offset + 1
                        progress_at = time.monotonic()
                    continue
                code = error.code()
                if code == KafkaError._PARTITION_EOF:
                    # The log ends at message.offset(); a gap up to it counts as read.
                    if offset >= end:
                        position = end
                        break
                elif code == KafkaError._AUTO_OFFSET_RESET:
                    position = _skip_lost(consumer, offset_range, position, fail_on_data_loss)
                    progress_at = time.monotonic()
                    if position < end:
                        consumer.assign([KafkaTopicPartition(topic, partition, position)])
                    break
                elif error.fatal():
                    raise SourceError(f"reading {offset_range}: {error.str()}")
                # Other errors (a broker restarting, a leader moving) are retried by the
                # client; the poll timeout bounds how long.
            if position < end and time.monotonic() - progress_at > poll_timeout_s:
                raise SourceError(
                    f"reading {offset_range}: no record at or after offset {position} within "
                    f"{poll_timeout_s:g} s (option kafkaConsumer.pollTimeoutMs) from "
                    f"{consumer_config.get('bootstrap.servers')}"
                )
    finally:
        consumer.close()


def _skip_lost(
    consumer: Consumer, offset_range: OffsetRange, position: int, fail_on_data_loss: bool
) -> int:
    """After an out-of-range fetch at `position`: report what was lost and return where
    reading goes on (`offset_range.end` when nothing of the range is left)."""
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    low, high = consumer.get_watermark_offsets(
        KafkaTopicPartition(topic, partition), timeout=10, cached=False
    )
    if position < low:
        lost_to = min(low, end)
        report_data_loss(
            f"offsets {position} to {lost_to - 1} of {topic}-{partition} (range "
            f"[{offset_range.start}, {end})) are gone: the log now starts at {low}",
            fail_on_data_loss,
            LOG,
        )
        return lost_to
    report_data_loss(
        f"offset {position} of {topic}-{partition} (range [{offset_range.start}, {end})) is "
        f"past the log end {high}: records the query planned to read are gone",
        fail_on_data_loss,
        LOG,
    )
    return end
