"""Log compaction with real clients: a compacted topic on three replicas read back by
confluent-kafka (latest value per key, tombstoned keys gone, offsets kept), replicas that end
byte-identical, `__consumer_offsets` shrinking under one group's commits, and KIP-467's
refusal of records without a key."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from clients import RawConnection, consume, create_topic, make_consumer, produce, wait_until
from confluent_kafka import KafkaError, TopicPartition
from harness import ClusterNode, ClusterProcess

from raftka.protocol.batch_builder import build_batch

pytestmark = pytest.mark.timeout(120)

INVALID_RECORD = 87
CLUSTER_CONFIG = {
    "log.cleaner.backoff.ms": "200",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "4096",
    # The offsets topic keeps broker defaults: its commits stay uncleaned for 3 s, long
    # enough to measure the size they take before the cleaner shrinks them.
    "log.cleaner.min.compaction.lag.ms": "3000",
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
    "min.compaction.lag.ms": "0",
}
KEYS = 40
UPDATES = 1500
DELETED = 10
FILLER = 150
COMMITS = 300


def log_bytes(node: ClusterNode, topic: str, partition: int = 0) -> bytes:
    """The concatenated `*.log` segments of one replica, in offset order."""
    folder = Path(node.data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


def read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    # Small fetches: a read takes many of them, so cleanings may swap segments in between.
    got = consume(
        bootstrap,
        topic,
        [0],
        start=0,
        timeout=30,
        max_partition_fetch_bytes=1024,
    )[0]
    return [(m.offset(), m.key(), m.value()) for m in got]


def test_a_compacted_topic_keeps_the_latest_value_per_key_on_every_replica(
    cluster_factory: Any,
) -> None:
    cluster: ClusterProcess = cluster_factory(3, CLUSTER_CONFIG)
    bootstrap = cluster.bootstrap
    topic = "compacted"
    create_topic(bootstrap, topic, 1, TOPIC_CONFIG, replication_factor=3)
    records: list[dict[str, Any]] = []
    for i in range(UPDATES):
        records.append({"key": b"k%d" % (i % KEYS), "value": b"v%d" % i})
    records += [{"key": b"k%d" % i, "value": None} for i in range(DELETED)]
    # Distinct keys last: the active segment (never cleaned) then holds no superseded record.
    records += [{"key": b"f%d" % i, "value": b"x" * 30} for i in range(FILLER)]
    # Small batches, so that segments roll and the cleaner has whole segments to rewrite.
    result = produce(bootstrap, topic, records, acks="all", linger_ms=2, batch_num_messages=20)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    for report in result.reports:
        assert report.error is None, report.error
        written[report.offset] = (records[report.index]["key"], records[report.index]["value"])
    model: dict[bytes, bytes | None] = {}
    for offset in sorted(written):
        key, value = written[offset]
        model[key] = value
    model = {key: value for key, value in model.items() if value is not None}
    assert len(model) == KEYS - DELETED + FILLER

    reads: list[int] = []
    violations: list[str] = []

    def compacted() -> bool:
        # Every read, during compaction too, sees records at the offsets they were written
        # at, in ascending order.
        seen = read_from_start(bootstrap, topic)
        reads.append(len(seen))
        offsets = [offset for offset, _, _ in seen]
        if offsets != sorted(set(offsets)):
            violations.append(f"offsets out of order or repeated: {offsets}")
        for offset, key, value in seen:
            if written.get(offset) != (key, value):
                violations.append(f"offset {offset} holds {key!r}={value!r}")
        latest = {key: value for _, key, value in seen}
        return len(seen) == len(model) and latest == model

    wait_until(compacted, 60, "a read from the start that sees exactly the latest values", 0.5)
    assert not violations, violations[:5]
    print(f"records read from the start, read after read: {reads}")

    def identical() -> bytes | None:
        blobs = [log_bytes(node, topic) for node in cluster.nodes]
        return blobs[0] if blobs[0] and all(b == blobs[0] for b in blobs) else None

    wait_until(identical, 30, "byte-identical batches on the three replicas", 0.25)
    # One group committing again and again: compaction keeps its latest commit only. This
    # comes before the replica's kill below: the restarted replica answers NOT_COORDINATOR
    # while the offsets partition it may have led elects a new leader, and librdkafka then
    # looks the coordinator up again but fails a synchronous commit or a committed() so
    # answered (it sends neither again).
    consumer = make_consumer(bootstrap, group_id="compaction-commits")
    try:
        for i in range(COMMITS):
            consumer.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
    finally:
        consumer.close()
    node = cluster.nodes[0]
    before = len(log_bytes(node, "__consumer_offsets"))
    sizes: list[int] = []

    def shrunk() -> bool:
        sizes.append(len(log_bytes(node, "__consumer_offsets")))
        return sizes[-1] < before * 0.75

    wait_until(shrunk, 45, f"__consumer_offsets to shrink below 75% of {before} bytes", 0.5)
    print(f"__consumer_offsets-0 on node 1: {before} -> {sizes[-1]} bytes")
    check = make_consumer(bootstrap, group_id="compaction-commits")
    try:
        committed = check.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == COMMITS, "the group's latest commit survives compaction"
    finally:
        check.close()

    # A replica killed and restarted recovers its cleaned segments as they were.
    killed = cluster.nodes[1]
    before_kill = log_bytes(killed, topic)
    killed.kill()
    killed.start()
    assert log_bytes(killed, topic) == before_kill
    wait_until(identical, 30, "byte-identical batches after a replica's restart", 0.25)


def produce_v9(bootstrap: str, topic: str, records: bytes) -> Any:
    """The partition answer of one Produce v9 (acks=all) to partition 0."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.produce.v9.response import ProduceResponse

    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    with RawConnection(bootstrap) as conn:
        conn.send_request(request)
        return conn.recv_response(ProduceResponse).responses[0].partition_responses[0]


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = make_consumer(bootstrap)
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_a_compacted_topic_refuses_records_without_a_key(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(config={"cleanup.policy": "compact"})
    result = produce(bootstrap, topic, [{"value": b"no key"}], retries=0)
    (report,) = result.reports
    assert report.error is not None and report.error.code() == KafkaError.INVALID_RECORD
    batch = build_batch(
        [(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")], int(time.time() * 1000)
    )
    answer = produce_v9(bootstrap, topic, batch)
    assert answer.error_code == INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    # Each refused record carries Kafka's reason; the answer's own message names it too, raftka's
    # as it is and Kafka's inside "One or more records have been rejected due to ...".
    reason = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert [e.batch_index_error_message for e in answer.record_errors] == [reason, reason]
    assert reason in answer.error_message, answer.error_message
    # A batch large enough to be scanned in a worker thread.
    large: list[tuple[bytes | None, bytes | None]] = [(b"k%d" % i, b"v" * 100) for i in range(2000)]
    large[1500] = (None, b"v")
    answer = produce_v9(bootstrap, topic, build_batch(large, int(time.time() * 1000)))
    assert answer.error_code == INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1500]
    assert high_watermark(bootstrap, topic) == 0, "nothing of the refused batches was written"
    large[1500] = (b"k1500", b"v")
    assert produce_v9(bootstrap, topic, build_batch(large, 0)).error_code == 0
    # Keyed records are taken, and a topic that is not compacted takes records without keys.
    assert produce_v9(bootstrap, topic, build_batch([(b"a", b"1")], 0)).error_code == 0
    other = new_topic()
    assert produce_v9(bootstrap, other, build_batch([(None, b"1")], 0)).error_code == 0


def test_java_and_librdkafka_consumers_read_a_compacted_log_alike(
    broker_factory: Any, java_tool: Any
) -> None:
    broker = broker_factory({"log.cleaner.backoff.ms": "200"})
    bootstrap = broker.bootstrap
    topic = "compacted-java"
    # Tombstones stay an hour: they carry a delete horizon, their batch a new base timestamp.
    create_topic(bootstrap, topic, 1, {**TOPIC_CONFIG, "delete.retention.ms": "3600000"})
    base = int(time.time() * 1000) - 60_000
    records: list[dict[str, Any]] = [
        {"key": b"k%d" % (i % 20), "value": b"v%d" % i, "timestamp": base + i} for i in range(600)
    ]
    records += [{"key": b"k%d" % i, "value": None, "timestamp": base + 700 + i} for i in range(5)]
    records += [
        {"key": b"f%d" % i, "value": b"x" * 30, "timestamp": base + 800 + i} for i in range(FILLER)
    ]
    result = produce(bootstrap, topic, records, linger_ms=2, batch_num_messages=20)
    latest: dict[bytes, tuple[int, bytes | None, int]] = {}
    for report in sorted(result.reports, key=lambda r: r.offset):
        assert report.error is None, report.error
        record = records[report.index]
        latest[record["key"]] = (report.offset, record["value"], record["timestamp"])
    expected = sorted((o, k, v, ts) for k, (o, v, ts) in latest.items())

    def librdkafka_sees_the_compacted_log() -> bool:
        got = consume(bootstrap, topic, [0], start=0, timeout=30)[0]
        return [(m.offset(), m.key(), m.value(), m.timestamp()[1]) for m in got] == expected

    wait_until(librdkafka_sees_the_compacted_log, 60, "librdkafka to read the compacted log", 0.5)
    # Records after the clean requests' control batches: the Java consumer reads past them.
    later = [{"key": b"z%d" % i, "value": b"z", "timestamp": base + 900 + i} for i in range(3)]
    for report in produce(bootstrap, topic, later).reports:
        assert report.error is None, report.error
        record = later[report.index]
        expected.append((report.offset, record["key"], record["value"], record["timestamp"]))
    expected.sort()
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, "earliest", len(expected), 30000)
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in rows] == [
        (o, k.decode(), None if v is None else v.decode(), ts) for o, k, v, ts in expected
    ]
