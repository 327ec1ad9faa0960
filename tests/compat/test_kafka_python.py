"""kafka-python (pure-Python client with its own protocol code) against the broker."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def _producer(bootstrap: str, **conf) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=20000, **conf)


def _consumer(bootstrap: str, **conf) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=30000,
        **conf,
    )


def _poll_n(consumer: KafkaConsumer, n: int, timeout: float = 60.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out: got {len(out)} of {n} records"
        for recs in consumer.poll(timeout_ms=int(min(left, 1.0) * 1000)).values():
            out.extend(recs)
    return out


@pytest.mark.parametrize(
    "producer_conf",
    [
        pytest.param({"acks": 1}, id="acks1"),
        # The client's defaults: acks=all with idempotence (InitProducerId, sequences).
        pytest.param({}, id="defaults"),
    ],
)
def test_producer_consumer_round_trip_with_keys(bootstrap, new_topic, producer_conf):
    topic = new_topic(partitions=2)
    n = 1000
    producer = _producer(bootstrap, **producer_conf)
    try:
        futures = [
            (i, producer.send(topic, key=f"key{i % 17}".encode(), value=f"value{i}".encode()))
            for i in range(n)
        ]
        producer.flush(timeout=60)
        meta = {i: f.get(timeout=30) for i, f in futures}
    finally:
        producer.close(timeout=10)

    sent: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for i, md in meta.items():
        assert md.topic == topic
        sent.setdefault(md.partition, []).append(
            (md.offset, f"key{i % 17}".encode(), f"value{i}".encode())
        )

    consumer = _consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = _poll_n(consumer, n)
    finally:
        consumer.close()
    assert len(got) == n
    by_part: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for r in got:
        by_part.setdefault(r.partition, []).append((r.offset, r.key, r.value))
    # Per partition: records come back in produce order, at the acknowledged offsets.
    assert by_part == sent
    for rows in by_part.values():
        assert [o for o, _, _ in rows] == sorted(o for o, _, _ in rows)


def test_seek_to_offset(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    producer = _producer(bootstrap, acks=1)
    try:
        futures = [
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(50)
        ]
        producer.flush(timeout=60)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == sorted(offsets)

    consumer = _consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offsets[20])
        got = _poll_n(consumer, 30)
        assert [r.offset for r in got] == offsets[20:]
        assert [(r.key, r.value) for r in got] == [(b"k%d" % i, b"v%d" % i) for i in range(20, 50)]
        # end_offsets is the high watermark: last offset + 1.
        assert consumer.end_offsets([tp])[tp] == offsets[-1] + 1
        assert consumer.beginning_offsets([tp])[tp] <= offsets[0]
        assert consumer.partitions_for_topic(topic) == {0}
    finally:
        consumer.close()


def test_compressed_round_trip(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    producer = _producer(bootstrap, acks=1, compression_type="gzip", linger_ms=20)
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"gz-%d" % i) for i in range(300)]
        producer.flush(timeout=60)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    consumer = _consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offsets[0])
        got = _poll_n(consumer, 300)
    finally:
        consumer.close()
    assert [r.offset for r in got] == offsets
    assert [r.value for r in got] == [b"gz-%d" % i for i in range(300)]
