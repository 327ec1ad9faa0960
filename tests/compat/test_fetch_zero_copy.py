"""Fetch sends segment bytes with sendfile: responses decided before retention deletes their
segment still carry exactly the batches decided (never bytes of another file or a short
frame), or OFFSET_OUT_OF_RANGE when decided after it."""

from __future__ import annotations

import struct
import time
from typing import Any

from clients import RawConnection, fetch_v12
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse
from kio.serial import entity_reader

from raftka.protocol.records import scan_batches

SEGMENT_BYTES = 256 * 1024
RECORDS = 8000
VALUE_BYTES = 1000


def _value(i: int) -> bytes:
    return f"{i:08d}".encode() * (VALUE_BYTES // 8)


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 64 * 1024})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=_value(i), partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _fetch(topic: str, offset: int) -> Any:
    return fetch_v12(topic, offset, max_bytes=8 << 20, partition_max_bytes=4 << 20)


def test_responses_in_flight_when_retention_deletes_their_segments(
    broker_factory, new_topic
) -> None:
    broker = broker_factory({"log.retention.check.interval.ms": "100"})
    topic = new_topic(
        partitions=1, bootstrap=broker.bootstrap, config={"segment.bytes": str(SEGMENT_BYTES)}
    )
    _produce(broker.bootstrap, topic)
    offsets = list(range(0, RECORDS - 100, 97))
    with RawConnection(broker.bootstrap, timeout=30) as conn:
        # Pipelined and not read yet: the responses fill the socket buffers, so most are
        # still queued (their file ranges decided) when the segments go.
        for offset in offsets:
            conn.send_request(_fetch(topic, offset))
        time.sleep(1)
        # Retention keeps about one segment: every other segment file is deleted.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(
                    "retention.bytes",
                    str(SEGMENT_BYTES),
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(timeout=10)
        _wait_for_log_start_past(broker.bootstrap, topic, RECORDS // 2)
        served = out_of_range = 0
        for number, offset in enumerate(offsets, start=1):
            frame = conn.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == number
            assert frame[4] == 0  # no tagged fields in the response header
            response, size = entity_reader(FetchResponse)(frame, 5)
            assert size + 5 == len(frame)
            partition = response.responses[0].partitions[0]
            if partition.error_code == ErrorCode.offset_out_of_range:
                out_of_range += 1
                continue
            assert partition.error_code == ErrorCode.none
            scan = scan_batches(partition.records, 0, verify_crc=True)
            assert scan.error is None and scan.valid_end == len(partition.records)
            first = scan.headers[0]
            assert first.base_offset <= offset <= first.base_offset + first.last_offset_delta
            # The first record is the one produced at its offset, not another file's bytes.
            assert _value(first.base_offset)[:16] in partition.records
            served += 1
    assert served + out_of_range == len(offsets)
    assert served > 0  # at least some ranges outlived their files' deletion


def _wait_for_log_start_past(bootstrap: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watch"})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if low > offset:
                return
            time.sleep(0.1)
        raise AssertionError(f"retention left the log starting at {low}, not past {offset}")
    finally:
        consumer.close()


def test_consumer_reads_every_record_through_sendfile(broker_factory, new_topic) -> None:
    broker = broker_factory()
    topic = new_topic(
        partitions=1, bootstrap=broker.bootstrap, config={"segment.bytes": str(SEGMENT_BYTES)}
    )
    _produce(broker.bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{topic}-g",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=1):
                assert message.error() is None, message.error()
                assert message.offset() == seen
                assert message.value() == _value(seen)
                seen += 1
        assert seen == RECORDS
    finally:
        consumer.close()
