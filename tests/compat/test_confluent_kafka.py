"""confluent-kafka (librdkafka) against the broker, unchanged: produce, consume, admin.

Every expectation here is Apache Kafka's behaviour; the suite also runs against a real
Kafka with --bootstrap-servers."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from clients import (
    consume,
    make_consumer,
    make_producer,
    produce,
    strictly_increasing,
    wait_until,
    watermarks,
)
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

TIMESTAMP_CREATE_TIME = 1


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def _values(msgs) -> list[bytes]:
    return [m.value() for m in msgs]


# ------------------------------------------------------------------------------ produce


def test_100k_records_keys_headers_timestamps_round_trip(bootstrap, new_topic):
    partitions = 4
    topic = new_topic(partitions=partitions)
    n = 100_000
    base_ts = int(time.time() * 1000) - 2 * n  # explicit, in the past, all distinct

    def rec(i: int) -> dict:
        return {
            "key": f"key-{i % 997}".encode(),
            "value": f"value-{i}".encode(),
            "headers": [("idx", str(i).encode()), ("kind", b"compat")],
            "timestamp": base_ts + i,
        }

    res = produce(bootstrap, topic, (rec(i) for i in range(n)), timeout=120, linger_ms=20)
    assert not res.errors, res.errors[:5]

    # Produce order per partition, as the client's partitioner placed each record.
    expected: dict[int, list[int]] = {}
    offsets: dict[int, list[int]] = {}
    for r in sorted(res.reports, key=lambda r: r.index):
        expected.setdefault(r.partition, []).append(r.index)
        offsets.setdefault(r.partition, []).append(r.offset)
    # Same key -> same partition; 997 keys spread over all partitions.
    assert set(expected) == set(range(partitions))
    for p, offs in offsets.items():
        assert strictly_increasing(offs), f"partition {p}: offsets not increasing"

    got = consume(bootstrap, topic, range(partitions), count=n, timeout=180)
    assert sum(len(v) for v in got.values()) == n
    for p in range(partitions):
        msgs = got[p]
        assert [m.offset() for m in msgs] == offsets[p], f"partition {p}: offsets differ"
        for m, i in zip(msgs, expected[p], strict=True):
            want = rec(i)
            assert m.key() == want["key"]
            assert m.value() == want["value"]
            assert m.headers() == want["headers"]
            assert m.timestamp() == (TIMESTAMP_CREATE_TIME, want["timestamp"])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(bootstrap, new_topic, codec):
    topic = new_topic(partitions=1)
    n = 2000
    recs = [
        {"key": f"k{i}".encode(), "value": (f"{codec}-value-{i}-" * 8).encode(), "partition": 0}
        for i in range(n)
    ]
    res = produce(bootstrap, topic, recs, compression_type=codec, linger_ms=50)
    assert not res.errors, res.errors[:5]
    offsets = res.offsets_by_partition()[0]
    got = consume(bootstrap, topic, [0], count=n)[0]
    assert [m.offset() for m in got] == offsets
    assert [(m.key(), m.value()) for m in got] == [(r["key"], r["value"]) for r in recs]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(bootstrap, new_topic, acks):
    topic = new_topic(partitions=1)
    n = 500
    values = [f"acks-{acks}-{i}".encode() for i in range(n)]
    res = produce(bootstrap, topic, [{"value": v, "partition": 0} for v in values], acks=acks)
    assert not res.errors, res.errors[:5]
    if acks != "0":
        # With acks>=1 the broker reports where each record went.
        offs = res.offsets_by_partition()[0]
        assert strictly_increasing(offs)
        assert offs[0] >= 0
    # acks=0 gets no response, so the records may land a little later: read until all n.
    got = consume(bootstrap, topic, [0], count=n, timeout=60)[0]
    assert _values(got) == values
    if acks != "0":
        assert [m.offset() for m in got] == res.offsets_by_partition()[0]


def test_900kb_record(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    value = os.urandom(900 * 1024)
    res = produce(
        bootstrap,
        topic,
        [{"key": b"big", "value": value, "partition": 0}],
        message_max_bytes=2_000_000,
        compression_type="none",
    )
    assert not res.errors, res.errors
    got = consume(bootstrap, topic, [0], start=res.reports[0].offset, count=1)[0]
    assert len(got) == 1
    assert got[0].key() == b"big"
    assert got[0].value() == value
    assert got[0].offset() == res.reports[0].offset


def test_record_over_topic_max_message_bytes_is_rejected(bootstrap, new_topic):
    topic = new_topic(partitions=1, config={"max.message.bytes": "100000"})
    low, high = watermarks(bootstrap, topic)
    value = os.urandom(150_000)  # incompressible, and no compression anyway
    p = make_producer(bootstrap, message_max_bytes=1_000_000, compression_type="none")
    # The client limit is well above the record, so librdkafka sends it and the broker
    # must answer MESSAGE_TOO_LARGE (produce() would raise if the client rejected it).
    res = produce(bootstrap, topic, [{"value": value, "partition": 0}], producer=p)
    assert len(res.errors) == 1
    assert res.errors[0].error.code() == KafkaError.MSG_SIZE_TOO_LARGE, res.errors[0].error
    assert not res.errors[0].error.fatal()
    # Nothing was stored.
    assert watermarks(bootstrap, topic) == (low, high)
    # The same producer and partition keep working for records under the limit.
    ok = produce(bootstrap, topic, [{"value": b"small", "partition": 0}], producer=p)
    assert not ok.errors, ok.errors
    got = consume(bootstrap, topic, [0], start=low)[0]
    assert _values(got) == [b"small"]
    assert got[0].offset() == ok.reports[0].offset


# ------------------------------------------------------------------------------- reads


def test_offsets_for_times(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    base = int(time.time() * 1000) - 3_600_000
    # Two flushes: at least two batches, with lookups both at and inside batch bounds.
    p = make_producer(bootstrap, linger_ms=50)
    r1 = produce(
        bootstrap,
        topic,
        [
            {"value": f"t{i}".encode(), "timestamp": base + i * 1000, "partition": 0}
            for i in range(5)
        ],
        producer=p,
    )
    r2 = produce(
        bootstrap,
        topic,
        [
            {"value": f"t{i}".encode(), "timestamp": base + i * 1000, "partition": 0}
            for i in range(5, 10)
        ],
        producer=p,
    )
    assert not r1.errors and not r2.errors
    offs = r1.offsets_by_partition()[0] + r2.offsets_by_partition()[0]

    c = make_consumer(bootstrap)
    try:
        cases = {
            base - 10_000: offs[0],  # before everything: the first record
            base: offs[0],
            base + 1: offs[1],  # first record with timestamp >= target
            base + 3500: offs[4],  # inside the first batch
            base + 5000: offs[5],  # first record of the second batch
            base + 7999: offs[8],  # inside the second batch
            base + 9000: offs[9],  # last record
        }
        for target, want in cases.items():
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert tp.error is None, tp.error
            assert tp.offset == want, f"timestamp {target - base:+} -> {tp.offset}, want {want}"
        # Later than every record: Kafka answers offset -1 (librdkafka's OFFSET_END).
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=10)
        assert tp.error is None, tp.error
        assert tp.offset == -1
    finally:
        c.close()


def test_list_topics_shows_topic_and_partitions(bootstrap, new_topic):
    topic = new_topic(partitions=3)
    md = _admin(bootstrap).list_topics(timeout=10)
    assert md.brokers, "no brokers in metadata"
    assert topic in md.topics
    t = md.topics[topic]
    assert t.error is None, t.error
    assert sorted(t.partitions) == [0, 1, 2]
    for pid, pm in t.partitions.items():
        assert pm.id == pid
        assert pm.error is None, pm.error
        assert pm.leader in md.brokers
        assert pm.leader in pm.replicas
        assert pm.leader in pm.isrs
    # A single-topic request answers the same.
    md1 = make_producer(bootstrap).list_topics(topic, timeout=10)
    assert sorted(md1.topics[topic].partitions) == [0, 1, 2]


def test_watermarks_match_produced(bootstrap, new_topic):
    topic = new_topic(partitions=3)
    counts = {0: 10, 1: 0, 2: 37}
    recs = [
        {"value": f"p{p}-{i}".encode(), "partition": p} for p, n in counts.items() for i in range(n)
    ]
    res = produce(bootstrap, topic, recs)
    assert not res.errors
    by_part = res.offsets_by_partition()
    for p, n in counts.items():
        low, high = watermarks(bootstrap, topic, p)
        assert low == 0
        if n == 0:
            assert high == 0
            continue
        assert high == by_part[p][-1] + 1
        # [low, high) holds exactly what was produced.
        got = consume(bootstrap, topic, [p], start=low)[p]
        assert _values(got) == [f"p{p}-{i}".encode() for i in range(n)]
        assert [m.offset() for m in got] == by_part[p]


@pytest.mark.parametrize("codec", ["gzip", "lz4"])
def test_consume_from_offset_inside_compressed_batch(bootstrap, new_topic, codec):
    topic = new_topic(partitions=1)
    n = 100
    recs = [{"value": f"c{i}".encode(), "partition": 0} for i in range(n)]
    # One flush of 100 tiny records with linger: librdkafka puts them in one batch.
    res = produce(bootstrap, topic, recs, compression_type=codec, linger_ms=200)
    assert not res.errors
    offs = res.offsets_by_partition()[0]
    start = offs[37]
    got = consume(bootstrap, topic, [0], start=start)[0]
    assert [m.offset() for m in got] == offs[37:]
    assert _values(got) == [f"c{i}".encode() for i in range(37, n)]


# ------------------------------------------------------------------------------- admin


def test_describe_configs_reports_values_and_sources(bootstrap, new_topic):
    topic = new_topic(partitions=1, config={"max.message.bytes": "500000"})
    admin = _admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)

    def source(name: str) -> ConfigSource:
        return ConfigSource(entries[name].source)

    assert entries["max.message.bytes"].value == "500000"
    assert source("max.message.bytes") == ConfigSource.DYNAMIC_TOPIC_CONFIG
    # Defaults: not set on the topic, reported with where the value came from.
    for name in ("cleanup.policy", "retention.ms", "segment.bytes"):
        assert name in entries, f"{name} missing from DescribeConfigs"
        assert source(name) in (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG), (
            name,
            source(name),
        )
    assert entries["cleanup.policy"].value == "delete"
    assert int(entries["retention.ms"].value) != 0
    assert int(entries["segment.bytes"].value) > 0


def _create_error(admin: AdminClient, topic: NewTopic) -> KafkaError:
    fut = admin.create_topics([topic], request_timeout=15)[topic.topic]
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    return ei.value.args[0]


@pytest.mark.parametrize("name", ["bad topic name!", "x" * 250, ".."])
def test_create_topic_invalid_name(bootstrap, name):
    err = _create_error(_admin(bootstrap), NewTopic(name, num_partitions=1, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err  # INVALID_TOPIC_EXCEPTION (17)


def test_create_topic_that_exists(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    err = _create_error(_admin(bootstrap), NewTopic(topic, num_partitions=2, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
    # The existing topic is untouched.
    md = _admin(bootstrap).list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1]


def test_create_topic_zero_partitions(bootstrap):
    name = f"compat-zero-{uuid.uuid4().hex[:8]}"
    admin = _admin(bootstrap)
    err = _create_error(admin, NewTopic(name, num_partitions=0, replication_factor=1))
    assert err.code() == KafkaError.INVALID_PARTITIONS, err
    assert name not in admin.list_topics(timeout=10).topics


def test_delete_topics(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, [{"value": b"x", "partition": 0}])
    admin = _admin(bootstrap)
    admin.delete_topics([topic], request_timeout=15)[topic].result(timeout=20)
    wait_until(
        lambda: topic not in admin.list_topics(timeout=10).topics,
        timeout=30,
        what=f"{topic} to disappear from metadata",
    )
    # Deleting it again: the topic is unknown.
    fut = admin.delete_topics([topic], request_timeout=15)[topic]
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_produce_to_unknown_topic_auto_creates_it(bootstrap):
    topic = f"compat-auto-{uuid.uuid4().hex[:10]}"
    admin = _admin(bootstrap)
    assert topic not in admin.list_topics(timeout=10).topics
    res = produce(bootstrap, topic, [{"value": f"a{i}".encode()} for i in range(10)], timeout=60)
    assert not res.errors, res.errors[:3]
    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    parts = sorted(md.topics[topic].partitions)
    assert parts and parts == list(range(len(parts)))
    got = consume(bootstrap, topic, parts)
    assert sorted(v for msgs in got.values() for v in _values(msgs)) == sorted(
        f"a{i}".encode() for i in range(10)
    )


def test_null_and_empty_keys_values_headers(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    recs = [
        {"key": None, "value": b"no key"},
        {"key": b"tombstone", "value": None},
        {"key": b"", "value": b""},
        {"key": None, "value": None},
        {"key": b"h", "value": b"headers", "headers": [("a", None), ("", b""), ("a", b"2")]},
    ]
    res = produce(bootstrap, topic, [dict(r, partition=0) for r in recs])
    assert not res.errors
    got = consume(bootstrap, topic, [0], count=len(recs))[0]
    assert [(m.key(), m.value()) for m in got] == [(r["key"], r["value"]) for r in recs]
    assert [m.headers() for m in got[:4]] == [None] * 4
    assert got[4].headers() == [("a", None), ("", b""), ("a", b"2")]


def test_fetch_returns_a_batch_larger_than_the_partition_fetch_limit(bootstrap, new_topic):
    # Kafka (KIP-74) returns the first batch even if it exceeds max.partition.fetch.bytes,
    # so a consumer with a small limit still makes progress.
    topic = new_topic(partitions=1)
    values = [os.urandom(20_000) for _ in range(5)]
    res = produce(
        bootstrap, topic, [{"value": v, "partition": 0} for v in values], compression_type="none"
    )
    assert not res.errors
    got = consume(bootstrap, topic, [0], count=5, max_partition_fetch_bytes=1024)
    assert _values(got[0]) == values


def test_out_of_range_offset_resets_per_policy(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    res = produce(
        bootstrap, topic, [{"value": f"r{i}".encode(), "partition": 0} for i in range(10)]
    )
    assert not res.errors
    offs = res.offsets_by_partition()[0]
    # The broker answers OFFSET_OUT_OF_RANGE; librdkafka then applies auto.offset.reset.
    got = consume(bootstrap, topic, [0], start=offs[-1] + 1000, count=10, timeout=30)[0]
    assert [m.offset() for m in got] == offs
    assert _values(got) == [f"r{i}".encode() for i in range(10)]
