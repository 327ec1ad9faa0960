"""The Java kafka-clients library (the reference client; also what Spark uses), driven through
tests/compat/java/KafkaTool.java, whose commands print one JSON object per line."""

from __future__ import annotations

import uuid

from clients import consume, produce, strictly_increasing


def test_admin_create_list_describe(java_tool, bootstrap):
    topic = f"compat-java-{uuid.uuid4().hex[:10]}"
    [created] = java_tool.json("create-topic", bootstrap, topic, 3, 1)
    assert created == {"topic": topic, "partitions": 3, "replication_factor": 1}

    names = {row["topic"] for row in java_tool.json("list-topics", bootstrap)}
    assert topic in names

    rows = java_tool.json("describe-topic", bootstrap, topic)
    assert sorted(r["partition"] for r in rows) == [0, 1, 2]
    for r in rows:
        assert r["topic"] == topic
        assert r["leader"] >= 0
        assert r["leader"] in r["replicas"]
        assert r["leader"] in r["isr"]
        assert len(r["replicas"]) == 1


def test_produce_then_consume_assign_with_seek(java_tool, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    n = 200
    acked = java_tool.json("produce", bootstrap, topic, n, "enable.idempotence=false")
    assert len(acked) == n
    assert [a["key"] for a in acked] == [f"k{i}" for i in range(n)]
    assert {a["partition"] for a in acked} == {0}
    offsets = [a["offset"] for a in acked]
    assert strictly_increasing(offsets)

    # Seek into the middle and read to the end.
    start = 50
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, offsets[start], n - start, 30000)
    assert [r["offset"] for r in rows] == offsets[start:]
    assert [(r["key"], r["value"]) for r in rows] == [(f"k{i}", f"v{i}") for i in range(start, n)]

    # From the beginning.
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, "earliest", n, 30000)
    assert [r["offset"] for r in rows] == offsets

    # librdkafka reads what the Java client wrote.
    got = consume(bootstrap, topic, [0], count=n)[0]
    assert [(m.key(), m.value()) for m in got] == [
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(n)
    ]


def test_consume_what_librdkafka_wrote(java_tool, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    res = produce(
        bootstrap,
        topic,
        [
            {"key": f"key{i}".encode(), "value": f"val{i}".encode(), "partition": 0}
            for i in range(100)
        ],
        compression_type="lz4",
    )
    assert not res.errors
    offsets = res.offsets_by_partition()[0]
    rows = java_tool.json("consume-assign", bootstrap, topic, 0, offsets[10], 90, 30000)
    assert [r["offset"] for r in rows] == offsets[10:]
    assert [(r["key"], r["value"]) for r in rows] == [
        (f"key{i}", f"val{i}") for i in range(10, 100)
    ]


def test_idempotent_producer(java_tool, bootstrap, new_topic):
    """The Java producer's default (and Spark's sink): enable.idempotence=true, which needs
    InitProducerId and sequence numbers on the broker."""
    topic = new_topic(partitions=2)
    acked = java_tool.json("produce", bootstrap, topic, 300, "enable.idempotence=true")
    assert len(acked) == 300
    by_part: dict[int, list[int]] = {}
    for a in acked:
        by_part.setdefault(a["partition"], []).append(a["offset"])
    for p, offs in by_part.items():
        assert offs == sorted(set(offs)), f"partition {p}: duplicate or reordered offsets"
        rows = java_tool.json("consume-assign", bootstrap, topic, p, "earliest", len(offs), 30000)
        assert [r["offset"] for r in rows] == offs
